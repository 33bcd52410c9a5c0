"""Bad input through the command line and through Snakemake: one line naming the culprit, exit status 2,
no traceback, and nothing half-written left behind."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, snakemake, stop_engines, tiny_config
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

MODEL = "smollm2-135m-instruct"


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsweep.cli", *args], capture_output=True, text=True, cwd=cwd)


def assert_one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsweep: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def _setup_template(tmp_path_factory, sonnet):
    """The config and the code workload, made once through the command line (`specsweep workload`)."""
    smoke = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg = tiny_config(smoke, sonnet, run="err")
    tmp = tmp_path_factory.mktemp("err-template")
    cfg_path = tmp / "err.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    wl = tmp / "results/err/workloads/code.json"
    proc = cli("workload", "--config", str(cfg_path), "--name", "code", "--corpus", str(sonnet), "--out", str(wl))
    assert proc.returncode == 0, proc.stderr
    return cfg, cfg_path.read_bytes(), wl.read_bytes()


@pytest.fixture
def setup(tmp_path, _setup_template):
    """A test's own copy of the template (each test may edit or damage it)."""
    cfg, cfg_bytes, wl_bytes = _setup_template
    cfg_path = tmp_path / "err.yaml"
    cfg_path.write_bytes(cfg_bytes)
    wl = tmp_path / "results/err/workloads/code.json"
    wl.parent.mkdir(parents=True)
    wl.write_bytes(wl_bytes)
    return {"tmp": tmp_path, "cfg": cfg_path, "wl": wl, "study": build_study(copy.deepcopy(cfg))}


def test_config_file_missing(tmp_path):
    assert_one_line(
        cli("cells", "--config", str(tmp_path / "nope.yaml")), f"config {tmp_path / 'nope.yaml'}: file not found"
    )


def test_config_not_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: [unclosed\n")
    assert_one_line(cli("cells", "--config", str(bad)), f"config {bad}: not valid YAML")


def test_config_bad_value_via_cli(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["ladder"]["trident"]["gpu_memory_utilization"] = 1.2
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert_one_line(
        cli("cells", "--config", str(path)), "ladder.trident.gpu_memory_utilization: must be in (0, 1], got 1.2"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "speculative,line",
    [
        ({"prompt_lookup_min": 9}, "config: ladder.ngram.speculative: prompt_lookup_min (9) > prompt_lookup_max (5)"),
        # asked of the installed vLLM's SpeculativeConfig by the Snakefile's first step (check_ladder_for_run)
        (
            {"method": "medusa2", "prompt_lookup_min": None, "prompt_lookup_max": None},
            "config: ladder.ngram.speculative.method: 'medusa2' is not a speculative method of the installed vLLM",
        ),
    ],
    ids=["lookup-bounds", "unknown-method"],
)
def test_config_bad_value_via_snakemake(tmp_path, monkeypatch, speculative, line):
    """`snakemake -n` on a bad ladder: one line before any job, no cell folder made."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no marker of an earlier accepted check
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    spec = cfg["ladder"]["ngram"]["speculative"]
    spec |= speculative
    cfg["ladder"]["ngram"]["speculative"] = {k: v for k, v in spec.items() if v is not None}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path), "--cores", "1", check=False)
    assert proc.returncode != 0
    assert f"specsweep: error: {line}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("results/*/cells"))


def test_corpus_missing(setup):
    missing = setup["tmp"] / "no-sonnet.txt"
    out = setup["tmp"] / "c.txt"
    assert_one_line(
        cli("corpus", "--config", str(setup["cfg"]), "--set", f"sonnet_path={missing}", "--out", str(out)),
        f"corpus {missing}: file not found",
    )
    assert not out.exists()


def test_corpus_checksum(setup, sonnet):
    bad = setup["tmp"] / "sonnet-edited.txt"
    bad.write_text(sonnet.read_text() + "An extra line.\n")
    out = setup["tmp"] / "c.txt"
    assert_one_line(
        cli("corpus", "--config", str(setup["cfg"]), "--set", f"sonnet_path={bad}", "--out", str(out)),
        f"corpus {bad}: sha256",
        "expected d58663195ba6",
    )
    assert not out.exists()


def _run_cell(setup, out: Path, model_path: str, wl: Path | None = None):
    return cli(
        "run-cell",
        "--config",
        str(setup["cfg"]),
        "--workload-file",
        str(wl or setup["wl"]),
        "--out",
        str(out),
        "--model-path",
        model_path,
    )


def test_model_path_missing(setup):
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/vanilla/r1.json"
    assert_one_line(
        _run_cell(setup, out, str(setup["tmp"] / "no-model")), f"model path {setup['tmp'] / 'no-model'}: does not exist"
    )
    assert not out.exists()
    failure = json.loads((setup["tmp"] / f"results/err/failures/{MODEL}/code/vanilla/r1.json").read_text())
    assert failure["error_type"] == "SpecsweepError" and "does not exist" in failure["message"]


def test_model_path_without_config(setup):
    empty = setup["tmp"] / "empty-model"
    empty.mkdir()
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/ngram/r1.json"
    assert_one_line(_run_cell(setup, out, str(empty)), f"model path {empty}: has no config.json")
    assert not out.exists()


def test_workload_edited_by_hand(setup):
    doc = json.loads(setup["wl"].read_text())
    doc["prompts"][0]["text"] += " (edited)"
    setup["wl"].write_text(json.dumps(doc))
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/vanilla/r1.json"
    assert_one_line(_run_cell(setup, out, str(setup["tmp"])), f"workload file {setup['wl']}: content hash mismatch")
    assert not out.exists()


def test_cell_path_not_in_matrix(setup):
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/eagle/r1.json"
    assert_one_line(_run_cell(setup, out, str(setup["tmp"])), f"cell {MODEL}/code/eagle: not part of run 'err'")


def test_cell_path_of_other_run(setup):
    out = setup["tmp"] / f"results/paper/cells/{MODEL}/code/vanilla/r1.json"
    assert_one_line(_run_cell(setup, out, str(setup["tmp"])), "run 'paper' is not the config's run 'err'")


def test_cell_path_malformed(setup):
    assert_one_line(_run_cell(setup, setup["tmp"] / "vanilla.json", str(setup["tmp"])), "expected .../{run}/cells/")


# --- cell JSON fed to aggregation -------------------------------------------------------------------------

REAL_CELL = ROOT / "results/h200-smollm2/cells" / MODEL / "sonnet/vanilla/r1.json"  # real vLLM, H200


def _tables_with(setup, text: str, where: str = "code/vanilla/r1.json"):
    path = setup["tmp"] / f"results/err/cells/{MODEL}/{where}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out = setup["tmp"] / "tables"
    proc = cli("tables", "--config", str(setup["cfg"]), "--results", str(setup["tmp"] / "results"), "--out", str(out))
    assert not (out / "cells.parquet").exists()
    return proc, path


def _real_cell(**changes) -> dict:
    doc = json.loads(REAL_CELL.read_text())
    doc.update(run="err", workload="code", config="vanilla")
    for dotted, value in changes.items():
        node = doc
        *head, last = dotted.split("__")
        for k in head:
            node = node[k]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return doc


def test_cell_truncated(setup):
    text = REAL_CELL.read_text()
    proc, path = _tables_with(setup, text[: len(text) // 2])
    assert_one_line(proc, f"cell {path}: not valid JSON (truncated or corrupt?)")


def test_cell_empty(setup):
    proc, path = _tables_with(setup, "")
    assert_one_line(proc, f"cell {path}: file is empty")


def test_cell_not_json(setup):
    proc, path = _tables_with(setup, "model: smollm2\nthroughput: fast\n")
    assert_one_line(proc, f"cell {path}: not valid JSON")


def test_cell_schema_invalid(setup):
    proc, path = _tables_with(setup, json.dumps(_real_cell(tokens__output_tok_s=None)))
    assert_one_line(proc, f"cell {path}: tokens: 'output_tok_s' is a required property")


def test_cell_wrong_units(setup):
    proc, path = _tables_with(setup, json.dumps(_real_cell(units__time="ms")))
    assert_one_line(proc, f"cell {path}: units.time: 's' was expected")


def test_cell_negative_throughput(setup):
    proc, path = _tables_with(setup, json.dumps(_real_cell(tokens__output_tok_s=-5.0)))
    assert_one_line(proc, f"cell {path}: tokens.output_tok_s: -5.0 is less than or equal to the minimum of 0")


def test_cell_at_the_wrong_path(setup):
    """A cell copied to another cell's path (here: a vanilla cell saved as ngram) is refused."""
    proc, path = _tables_with(setup, json.dumps(_real_cell()), where="code/ngram/r1.json")
    assert_one_line(proc, f"cell {path}: holds {MODEL}/code/vanilla of run err, but its path says {MODEL}/code/ngram")


def test_failed_cell_is_listed_by_the_tables(setup):
    """A cell that failed leaves a failure record; the tables list it as failed, with its error, not as data."""
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/suffix/r1.json"
    assert_one_line(_run_cell(setup, out, str(setup["tmp"] / "gone")), "does not exist")
    tables_dir = setup["tmp"] / "tables"
    proc = cli(
        "tables", "--config", str(setup["cfg"]), "--results", str(setup["tmp"] / "results"), "--out", str(tables_dir)
    )
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    rows = {r["config"]: r for r in pq.read_table(tables_dir / "cells.parquet").to_pylist() if r["workload"] == "code"}
    assert rows["suffix"]["status"] == "failed" and "SpecsweepError: model path" in rows["suffix"]["error"]
    assert rows["suffix"]["output_tok_s_median"] is None and rows["suffix"]["n"] == 0
    assert rows["vanilla"]["status"] == "missing"
    assert "## Failed cells" in (tables_dir / "summary.md").read_text()


def test_failed_rerun_keeps_the_previous_measurement(setup):
    """A rerun that fails (here: a mistyped --model-path) over an existing good cell leaves that cell where it
    was, and records the failure beside it."""
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/vanilla/r1.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    good = json.dumps(_real_cell())
    out.write_text(good)
    assert_one_line(_run_cell(setup, out, str(setup["tmp"] / "typo")), "does not exist")
    assert out.read_text() == good
    assert (setup["tmp"] / f"results/err/failures/{MODEL}/code/vanilla/r1.json").is_file()


def test_repeat_outside_the_config(setup):
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/vanilla/r3.json"
    assert_one_line(_run_cell(setup, out, str(setup["tmp"])), "repeat 3 is outside 1..2")


def test_unwritable_output_is_one_line(setup, tmp_path):
    """An output folder that cannot be made (here: its parent is a file; disk full and read-only folders are the
    same class of OSError) is one line naming the file, not a traceback."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    proc = cli(
        "tables",
        "--config",
        str(setup["cfg"]),
        "--results",
        str(setup["tmp"] / "results"),
        "--out",
        str(blocker / "tables"),
    )
    assert_one_line(proc, str(blocker))


# --- inputs that used to be read without end, tracebacks and silent accepts -------------------------------


def test_corpus_not_a_regular_file(setup):
    """A device named as the corpus (here /dev/zero, which reads without end) is refused without reading it."""
    import resource

    def cap_memory() -> None:  # were it read, it would fail here at 1 GiB, not take the machine's memory
        resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))

    out = setup["tmp"] / "c.txt"
    args = ["corpus", "--config", str(setup["cfg"]), "--set", "sonnet_path=/dev/zero", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "specsweep.cli", *args], capture_output=True, text=True, preexec_fn=cap_memory
    )
    assert_one_line(proc, "corpus /dev/zero: not a regular file (config key sonnet_path)")
    assert not out.exists()


@pytest.mark.parametrize("record", ["[]", "{}", '{"error_type": "OSError"}'])
@pytest.mark.parametrize("command", ["tables", "status"])
def test_failure_record_not_an_object(setup, record, command):
    """A failure record that is a JSON array, an empty object or lacks its message is one line naming the file
    (not a traceback, not "failed: None: None")."""
    fail = setup["tmp"] / f"results/err/failures/{MODEL}/code/ngram/r1.json"
    fail.parent.mkdir(parents=True)
    fail.write_text(record)
    extra = ["--out", str(setup["tmp"] / "tables")] if command == "tables" else []
    proc = cli(command, "--config", str(setup["cfg"]), "--results", str(setup["tmp"] / "results"), *extra)
    assert_one_line(proc, f"failure record {fail}: ", "delete it")
    assert not (setup["tmp"] / "tables").exists()


def test_status_of_a_missing_results_folder(setup):
    """A mistyped --results is an error, not a run with nothing done (exit 0, "done 0")."""
    missing = setup["tmp"] / "resluts"
    proc = cli("status", "--config", str(setup["cfg"]), "--results", str(missing))
    assert_one_line(proc, f"--results {missing}: no such folder")
    assert proc.stdout == ""


def test_figures_from_missing_tables(setup):
    """figures --tables naming a folder that does not exist, or one without the tables, is one line naming it
    (not "(no file)"), and leaves no figures folder or staging folder behind."""
    missing = setup["tmp"] / "no-tables"
    out = setup["tmp"] / "figs"
    assert_one_line(
        cli("figures", "--config", str(setup["cfg"]), "--tables", str(missing), "--out", str(out)),
        f"--tables {missing}: no such folder",
    )
    missing.mkdir()
    (missing / "cells.parquet").write_bytes(b"")
    assert_one_line(
        cli("figures", "--config", str(setup["cfg"]), "--tables", str(missing), "--out", str(out)),
        f"--tables {missing}: has no speedup.parquet",
    )
    assert not [p.name for p in setup["tmp"].iterdir() if p.name.startswith((".figs", "figs"))]


@pytest.mark.slow
def test_max_model_len_below_a_workload_is_refused_before_the_engine(setup, smollm2):
    """engine.max_model_len below a workload's prompt + max_tokens is refused before any engine starts: one line
    naming the workload, its longest prompt + max_tokens and max_model_len, with no engine host spawned (none
    listed, no engine log beside the job's), and a failure record."""
    cfg = yaml.safe_load(setup["cfg"].read_text())
    cfg["engine"]["max_model_len"] = 100
    cfg_path = setup["tmp"] / "short.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    out = setup["tmp"] / f"results/err/cells/{MODEL}/code/vanilla/r1.json"
    log = setup["tmp"] / "logs/r1.log"
    log.parent.mkdir()
    args = ["--workload-file", str(setup["wl"]), "--out", str(out), "--model-path", str(smollm2), "--log", str(log)]
    try:
        proc = cli("run-cell", "--config", str(cfg_path), *args, cwd=setup["tmp"])
        hosts = cli("engines", cwd=setup["tmp"])
    finally:
        stop_engines(setup["tmp"])  # the old behaviour left a host running
    line = assert_one_line(proc, f"workload code on model {MODEL}: prompt ", "more than engine.max_model_len 100")
    m = re.search(r"needs (\d+) \+ 32 \(max_tokens\) = (\d+) tokens", line)
    assert m and int(m[1]) + 32 == int(m[2]) > 100, line
    assert hosts.returncode == 0 and hosts.stdout == "", hosts.stdout  # no engine host was spawned
    assert not list(log.parent.glob("engine-*.log"))  # ... nor its log written
    assert not out.exists()
    failure = json.loads((setup["tmp"] / f"results/err/failures/{MODEL}/code/vanilla/r1.json").read_text())
    assert "more than engine.max_model_len 100" in failure["message"]


@pytest.mark.slow
def test_exact_length_check_is_remembered_per_workload_tokenizer_and_limit(setup, smollm2):
    """Where the byte bound cannot prove that a workload fits, the prompts are tokenised once and the pass is
    recorded beside the workload file: the next cell of the same file, tokenizer and max_model_len skips the
    tokenizer, another limit or an edited workload file is checked again, and a limit too small is refused
    even after a pass at a larger one."""
    from specsweep import workloads
    from specsweep.runner import check_workload_fits

    wl_path = setup["wl"]
    wl = workloads.load(wl_path)
    longest = max(len(it["text"].encode()) + it["max_tokens"] for it in wl["prompts"] + wl["warmup"])
    cfg = yaml.safe_load(setup["cfg"].read_text())
    cfg["engine"]["max_model_len"] = longest  # the bound needs template + slack more: only the tokenizer proves it
    study = build_study(copy.deepcopy(cfg))
    cell = study.cell(MODEL, "code", "vanilla")
    assert check_workload_fits(study, cell, str(smollm2), wl, wl_path) == "tokenized"
    memos = sorted(p.name for p in wl_path.parent.iterdir() if p.name.startswith(f".{wl_path.name}.fits-"))
    assert len(memos) == 1
    assert check_workload_fits(study, cell, str(smollm2), wl, wl_path) == "memo"
    assert check_workload_fits(study, cell, str(smollm2), wl) == "tokenized"  # no file named: nothing recorded
    cfg["engine"]["max_model_len"] = longest + 1
    other = build_study(copy.deepcopy(cfg))
    assert check_workload_fits(other, other.cell(MODEL, "code", "vanilla"), str(smollm2), wl, wl_path) == "tokenized"
    cfg["engine"]["max_model_len"] = 100
    short = build_study(copy.deepcopy(cfg))
    with pytest.raises(SpecsweepError, match="more than engine.max_model_len 100"):
        check_workload_fits(short, short.cell(MODEL, "code", "vanilla"), str(smollm2), wl, wl_path)
    edited = wl_path.with_name("edited.json")
    edited.write_bytes(wl_path.read_bytes() + b"\n")
    assert check_workload_fits(study, cell, str(smollm2), wl, edited) == "tokenized"
    assert len([p for p in wl_path.parent.iterdir() if ".fits-" in p.name]) == 3


@pytest.mark.slow
def test_slurm_profile_without_a_partition(tmp_path, smoke_cfg, sonnet):
    """The SLURM profile with its slurm_partition removed (or left empty) stops the parse with one line naming
    the key: the dry run no longer plans GPU jobs for the cluster's default partition. The profile as shipped
    plans them."""
    cfg = tiny_config(smoke_cfg, sonnet, run="slurm")
    cfg_path = tmp_path / "slurm.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.v8+.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["default-resources"]["slurm_partition"]
    for name, partition in (("unset", None), ("empty", "")):
        folder = tmp_path / name
        folder.mkdir()
        changed = dict(profile, **{"default-resources": dict(profile["default-resources"])})
        if partition is None:
            del changed["default-resources"]["slurm_partition"]
        else:
            changed["default-resources"]["slurm_partition"] = partition
        (folder / "config.v8+.yaml").write_text(yaml.safe_dump(changed))
        proc = snakemake(tmp_path, "-n", "--profile", str(folder), "--configfile", str(cfg_path), check=False)
        assert proc.returncode != 0, proc.stdout[-2000:]
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
        assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        state = "is not set" if partition is None else "is empty"
        assert errors[0].startswith(f"specsweep: error: SLURM executor: default-resources slurm_partition {state}")
        assert "set slurm_partition under default-resources" in errors[0]
        assert "measure" in errors[0] and "Job stats" not in proc.stdout
    proc = snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles/slurm"), "--configfile", str(cfg_path))
    assert "measure" in proc.stdout


def test_staging_folders_of_killed_writes_are_removed(tmp_path):
    """The staging folders a killed tables or figures write left (`.tables.new-*`, `.tables.old-*`) are removed
    by the next write: those of a process that has ended. A concurrent write's (its process alive, here this
    test's) and another host's are left alone."""
    from specsweep.tables import write_set

    out = tmp_path / "tables"
    write_set(out, {"a.txt": b"old"}, "tables", "r")
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)
    left = {
        f".tables.new-{host}-{dead}-k1ll3d": False,  # a killed write: removed
        f".tables.old-{host}-{dead}": False,  # killed between the swap's rename and its removal: removed
        f".tables.new-{host}-{os.getpid()}-l1ve": True,  # a write in progress: kept
        f".tables.new-otherhost-{dead}-rem0te": True,  # another host's (the pid says nothing here): kept
        ".tables.new-0ldst4ge": False,  # an older specsweep's (no pid), more than an hour old: removed
        ".tables.new-fr3sh": True,  # ... and one of a minute ago: kept
    }
    for name in left:
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.txt").write_bytes(b"partial")
    hour_ago = time.time() - 3700
    os.utime(tmp_path / ".tables.new-0ldst4ge", (hour_ago, hour_ago))
    write_set(out, {"a.txt": b"new"}, "tables", "r")
    assert (out / "a.txt").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tables", *(n for n, keep in left.items() if keep)])


def test_output_into_a_closed_pipe_ends_quietly():
    """`specsweep cells ... | head`: the reader has gone, so the command stops without a word on stderr (no
    "(no file): Broken pipe") and with the status of a tool ended by SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specsweep.cli", "cells", "--config", str(ROOT / "config/config.yaml")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + signal.SIGPIPE, proc.stderr
    assert "error" not in proc.stderr and "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr
