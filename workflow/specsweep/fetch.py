"""Models as pinned inputs: a Hugging Face repo fetched at a pinned commit into resources/models/{model}, by a
CPU job of its own (rule fetch_model), never inside a GPU cell; and the record a cell keeps of the folder it
measured (`model_record`).

The fetch is atomic: files go into a fixed temporary folder beside the target (`.{name}.fetching`), are checked
against the repo listing (names, sizes, git ids of the small files), and the folder is renamed into place only
then. An interrupted fetch leaves the temporary folder, which the next fetch resumes (huggingface_hub keeps its
partial downloads there); the target path never holds a half-fetched model. A snapshot already in the
Hugging Face cache (HF_HUB_CACHE) at that commit is used without network (hard links, or a copy across file
systems).

Every failure a user can meet before a GPU second is a one-line SpecsweepError: a gated repo without a token or
licence, an unknown repo or revision, too little disk for the files (sizes from the listing, before any
download), no network.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .errors import SpecsweepError
from .jsonio import atomic_write_json, sha256_obj
from .paths import MODELS

RECORD = "specsweep-fetch.json"
FORMAT = "specsweep-fetch/1"
REVISION_RE = re.compile(r"^[0-9a-f]{40}$")
# Files at or below this size are hashed in full wherever a record needs their content (configs, tokenizers).
SMALL_FILE = 16 << 20
# Free space kept beyond the files themselves (huggingface_hub's metadata, logs, the file system's own needs).
DISK_HEADROOM = 1 << 30
# Repo files a model folder needs besides its weights (configs, tokenizers, chat templates, remote code).
_SIDE_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".py", ".jinja")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer.tiktoken", "tiktoken.model")


def is_hub_id(source: str) -> bool:
    """True for a Hugging Face repo id, False for a local folder (the runner's rule: a path that starts with
    '.', '/' or '~', or that exists, is local)."""
    if source.startswith((".", "/", "~")) or Path(source).exists():
        return False
    return True


def hub_url(repo_id: str) -> str:
    return f"https://huggingface.co/{repo_id}"


def names_regex(names: Iterable[str]) -> str:
    """A Snakemake wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


# ------------------------------------------------------------------------------------------------ listing


def select_files(paths: Iterable[str]) -> list[str]:
    """The files of a repo that a model folder needs: the top-level weights (safetensors when the repo has them,
    else pytorch_model*.bin, as vLLM loads them) and the top-level configs, tokenizers and templates. Never the
    other weight formats (TF, Flax, ONNX, GGUF) nor subfolders such as original/ (Meta's consolidated .pth)."""
    top = sorted({p for p in paths if "/" not in p and not p.startswith(".")})
    weights = [p for p in top if p.endswith(".safetensors") and not p.startswith("consolidated")]
    if not weights:
        weights = [p for p in top if p.endswith(".safetensors")]
    fmt = "safetensors"
    if not weights:
        weights = [p for p in top if p.startswith("pytorch_model") and p.endswith(".bin")]
        fmt = "bin"
    side = [p for p in top if p.endswith(_SIDE_SUFFIXES)]
    if fmt == "safetensors":  # the index of the format not loaded is not needed
        side = [p for p in side if not p.endswith(".bin.index.json")]
    else:
        side = [p for p in side if not p.endswith(".safetensors.index.json")]
    return sorted(set(weights) | set(side))


def _check_complete(label: str, files: Iterable[str], folder: Path | None = None) -> None:
    """A usable model: config.json, weights, a tokenizer, and every shard its index names."""
    names = set(files)
    if "config.json" not in names:
        raise SpecsweepError(f"{label}: has no config.json")
    if not any(n.endswith((".safetensors", ".bin")) for n in names):
        raise SpecsweepError(f"{label}: has no *.safetensors or pytorch_model*.bin weights")
    if not any(n in names for n in _TOKENIZER_FILES):
        raise SpecsweepError(f"{label}: has no tokenizer file ({', '.join(_TOKENIZER_FILES)})")
    if folder is not None:
        for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if index in names:
                try:
                    shards = set(json.loads((folder / index).read_text())["weight_map"].values())
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    raise SpecsweepError(f"{label}: {index} is not a valid weight index") from None
                missing = sorted(shards - names)
                if missing:
                    raise SpecsweepError(f"{label}: {index} names {len(missing)} missing shard(s), e.g. {missing[0]}")


# ------------------------------------------------------------------------------------------------ hashing


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_blob_id(path: Path) -> str:
    """The git object id of a file (what the Hub lists as blob id for a file not stored in LFS)."""
    h = hashlib.sha1()
    h.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _entry(size: int, sha256: str | None = None, git_oid: str | None = None) -> dict[str, Any]:
    return {"size": int(size), "sha256": sha256, "git_oid": git_oid}


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _log(msg: str) -> None:
    print(f"specsweep fetch: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ errors


def explain(exc: BaseException, repo_id: str, revision: str, endpoint: str | None = None) -> SpecsweepError | None:
    """The one-line error for a huggingface_hub or network exception (None when it is neither: a bug)."""
    from huggingface_hub import errors as hf_errors

    where = f"model {repo_id}"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    if isinstance(exc, hf_errors.GatedRepoError):
        from huggingface_hub import get_token

        why = "no Hugging Face token is set" if not get_token() else "the token in use has no access yet"
        return SpecsweepError(
            f"{where}: gated repo and {why}: accept the licence at {hub_url(repo_id)} and set HF_TOKEN"
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return SpecsweepError(
            f"{where}: revision {revision} is not a commit of this repo "
            f"(pin one listed at {hub_url(repo_id)}/commits/main)"
        )
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return SpecsweepError(
            f"{where}: no such repo on the Hugging Face Hub, or a private one "
            "(check hf_id; for a private repo set HF_TOKEN)"
        )
    if isinstance(exc, hf_errors.HFValidationError):
        return SpecsweepError(f"{where}: not a valid Hugging Face repo id ({first})")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return SpecsweepError(
            f"{where}: HF_HUB_OFFLINE is set and revision {revision[:12]} is not complete in the Hugging Face cache "
            f"(HF_HUB_CACHE); fetch it on a machine with network access (snakemake --until fetch_model)"
        )
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return SpecsweepError(f"{where}: the disk filled up during the fetch ({first}); free space and rerun to resume")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        return SpecsweepError(f"{where}: the Hugging Face Hub answered HTTP {status} ({first}); rerun later to resume")
    module = type(exc).__module__.split(".")[0]
    if isinstance(exc, (ConnectionError, TimeoutError)) or module in (
        "httpx",
        "httpx2",
        "requests",
        "urllib3",
        "httpcore",
        "h11",
    ):
        from huggingface_hub import constants

        host = endpoint or constants.ENDPOINT
        return SpecsweepError(
            f"{where}: cannot reach the Hugging Face Hub at {host} ({type(exc).__name__}: {first}); check the network "
            f"or proxy, or run the fetch where there is network (snakemake --until fetch_model on a login node)"
        )
    return None


def _raise_explained(exc: BaseException, repo_id: str, revision: str, endpoint: str | None = None) -> None:
    err = explain(exc, repo_id, revision, endpoint)
    if err is None:
        raise exc
    raise err from None


# ------------------------------------------------------------------------------------------------ fetching


def _tmp_dir(out_dir: Path) -> Path:
    return out_dir.parent / f".{out_dir.name}.fetching"


def read_record(model_dir: Path | str) -> dict[str, Any] | None:
    path = Path(model_dir) / RECORD
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SpecsweepError(f"model folder {model_dir}: {RECORD} is not valid JSON (fetch it again)") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or not isinstance(rec.get("files"), dict):
        raise SpecsweepError(f"model folder {model_dir}: {RECORD} is not a {FORMAT} record (fetch it again)")
    return rec


def _verify(
    folder: Path,
    files: dict[str, dict[str, Any]],
    label: str,
    full: bool = False,
    remove_bad: bool = True,
    cache: Path | None = None,
) -> dict[str, str]:
    """Every listed file present with its listed size; small files (and all files when full) against their id.
    Returns the sha256 of each file it hashed: the content as it is in ``folder``. A file that fails is removed
    (remove_bad), with huggingface_hub's metadata of it, so that the next fetch downloads it again. ``cache``:
    the Hugging Face cache snapshot the files were linked from, whose blobs are named by their content id; a
    file that fails there is a corrupt blob, and the error says how to evict it (a rerun would link it again)."""
    hashed: dict[str, str] = {}
    for name, want in sorted(files.items()):
        path = folder / name
        problem = None
        check = full or want["size"] <= SMALL_FILE
        if not path.is_file():
            problem = "is missing"
        elif path.stat().st_size != want["size"]:
            problem = f"has {path.stat().st_size} bytes, the listing says {want['size']}"
        elif check and want.get("git_oid") and git_blob_id(path) != want["git_oid"]:
            problem = "differs from the listing (git blob id)"
        elif check and (full or want.get("sha256")):
            hashed[name] = file_sha256(path)
            if want.get("sha256") and hashed[name] != want["sha256"]:
                problem = "differs from the listing (sha256)"
        if problem and not remove_bad:
            raise SpecsweepError(f"{label}: {name} {problem} (remove the folder to fetch it again)")
        if problem:
            path.unlink(missing_ok=True)
            meta = folder / ".cache" / "huggingface" / "download" / f"{name}.metadata"
            meta.unlink(missing_ok=True)
            if cache is not None:  # the rest are links to the same cache: nothing to resume
                shutil.rmtree(folder, ignore_errors=True)
                blob = Path(os.path.realpath(cache / name))
                raise SpecsweepError(
                    f"{label}: {name} in the Hugging Face cache is corrupt: its blob's content does not hash to "
                    f"the blob's name; evict the blob (rm {blob}) and rerun to download it again"
                )
            raise SpecsweepError(f"{label}: {name} {problem} after the download; rerun to fetch it again")
    return hashed


def _free_bytes(path: Path) -> tuple[Path, int]:
    probe = path
    while not probe.exists():
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def _check_disk(label: str, folder: Path, files: dict[str, dict[str, Any]]) -> None:
    """Refuse, before any download, when the files still missing from folder (a resumed fetch has some) do not
    fit on its file system with 1 GiB to spare."""
    total = sum(e["size"] for e in files.values())
    have = sum(
        e["size"] for n, e in files.items() if (folder / n).is_file() and (folder / n).stat().st_size == e["size"]
    )
    need = total - have
    _, free = _free_bytes(folder)
    if need + DISK_HEADROOM > free:
        raise SpecsweepError(
            f"{label}: needs {_fmt_bytes(need)} more disk for {len(files)} files ({_fmt_bytes(total)} in all) "
            f"but {folder.parent} has {_fmt_bytes(free)} free (1 GiB is kept spare)"
        )


def _listing_from_hub(api: Any, repo_id: str, revision: str, endpoint: str | None) -> dict[str, dict[str, Any]]:
    """The repo's files at the revision with sizes and content ids, from one model_info call; a gated repo is
    checked for access (auth_check) before anything is downloaded."""
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        if getattr(info, "gated", False) and hasattr(api, "auth_check"):
            api.auth_check(repo_id)
    except Exception as exc:  # classified: one line, or re-raised when not a Hub/network error
        _raise_explained(exc, repo_id, revision, endpoint)
    if getattr(info, "sha", None) and info.sha != revision:
        raise SpecsweepError(
            f"model {repo_id}: revision {revision} resolves to commit {info.sha} on the Hub; pin the full commit sha"
        )
    listing: dict[str, dict[str, Any]] = {}
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        size = s.size if s.size is not None else (lfs.get("size") if isinstance(lfs, dict) else None)
        if size is None:
            raise SpecsweepError(f"model {repo_id}: the Hub listing gives no size for {s.rfilename}")
        listing[s.rfilename] = _entry(size, sha256=sha, git_oid=None if lfs else s.blob_id)
    return listing


def _listing_from_cache(
    repo_id: str, revision: str, cache_dir: str | None
) -> tuple[Path, dict[str, dict[str, Any]]] | None:
    """The snapshot of repo@revision in the Hugging Face cache, when it is complete there; resolved by
    huggingface_hub itself with local_files_only=True (no network). Each file's content id is its blob's name in
    the cache: the sha256 for an LFS file, the git blob id for any other."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    exact: list[str] | None = None
    try:  # huggingface_hub >= 1.x keeps the repo's tree listing per commit: then the exact file set is known
        from huggingface_hub import get_cached_repo_tree

        tree = get_cached_repo_tree(repo_id, revision=revision, cache_dir=cache_dir)
        exact = select_files(f.path for f in tree)
    except Exception:
        exact = None
    patterns = [glob.escape(f) for f in exact] if exact else [f"*{s}" for s in (".safetensors", *_SIDE_SUFFIXES)]
    try:
        snap = Path(
            snapshot_download(
                repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True, allow_patterns=patterns
            )
        )
    except (LocalEntryNotFoundError, FileNotFoundError):
        return None
    except HFValidationError as exc:
        _raise_explained(exc, repo_id, revision)
    present = [p.name for p in snap.iterdir() if p.is_file()]
    chosen = select_files(present)
    if exact is not None and set(exact) - set(chosen):
        return None
    try:
        _check_complete(f"model {repo_id}@{revision[:12]} in the Hugging Face cache", chosen, snap)
    except SpecsweepError as exc:
        _log(f"cached snapshot not used: {exc}")
        return None
    files: dict[str, dict[str, Any]] = {}
    for name in chosen:
        path = snap / name
        size = path.stat().st_size
        blob = Path(os.path.realpath(path)).name
        if re.fullmatch(r"[0-9a-f]{64}", blob):
            files[name] = _entry(size, sha256=blob)
        elif re.fullmatch(r"[0-9a-f]{40}", blob):
            files[name] = _entry(size, git_oid=blob)
        else:  # a cache without blob links (e.g. copies on a file system without symlinks): hash the content
            files[name] = _entry(size, sha256=file_sha256(path))
    return snap, files


def _materialise(snap: Path, files: dict[str, dict[str, Any]], tmp: Path, label: str) -> None:
    """Hard-link the cached files into tmp (same file system: no extra disk), else copy them after a disk check."""
    tmp.mkdir(parents=True, exist_ok=True)
    same_fs = os.stat(os.path.realpath(snap / next(iter(files)))).st_dev == os.stat(tmp).st_dev
    if not same_fs:
        _check_disk(label, tmp, files)
    for name in files:
        src, dst = Path(os.path.realpath(snap / name)), tmp / name
        if dst.is_file() and os.path.samefile(src, dst):
            continue  # linked by an interrupted run
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)


def fetch_model(
    repo_id: str,
    revision: str,
    out_dir: Path | str,
    *,
    api: Any = None,
    download: Callable[..., Any] | None = None,
    cache_dir: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    use_cache: bool = True,
    full_verify: bool = False,
) -> Path:
    """Fetch repo_id at the commit `revision` into out_dir, atomically; return out_dir.

    api (an HfApi) and download (snapshot_download) are parameters so that tests can inject the Hub's answers;
    cache_dir is the Hugging Face cache to reuse (default HF_HUB_CACHE). Every fetched file is hashed in full
    against its content id, and the record keeps the sha256 of the content as fetched (the manifest hash a
    cell records is of those bytes, never of what a listing or a blob's name says). full_verify: a folder
    already in place is hashed in full too (otherwise its sizes and small files are checked).
    """
    out_dir = Path(out_dir)
    label = f"model {repo_id}@{revision[:12]}"
    if not REVISION_RE.match(revision or ""):
        raise SpecsweepError(f"model {repo_id}: revision '{revision}' is not a 40-hex commit sha")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        rec = read_record(out_dir)
        if rec and rec.get("repo_id") == repo_id and rec.get("revision") == revision:
            _verify(out_dir, rec["files"], f"model folder {out_dir}", full=full_verify, remove_bad=False)
            _log(f"{out_dir} already holds {repo_id} at {revision}")
            return out_dir
        raise SpecsweepError(
            f"model folder {out_dir}: exists and is not {repo_id} at {revision} (remove it to fetch this revision)"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_dir(out_dir)
    marker, target = tmp / ".specsweep-fetching", f"{repo_id}@{revision}\n"
    if tmp.exists():
        if marker.is_file() and marker.read_text() == target:
            _log(f"resuming the interrupted fetch in {tmp}")
        else:  # left by a fetch of another repo or revision: nothing in it can be trusted
            _log(f"removing {tmp}, left by a fetch of another revision")
            shutil.rmtree(tmp)

    def start() -> None:  # the temporary folder exists only once the transfer starts
        tmp.mkdir(exist_ok=True)
        marker.write_text(target)

    cached = _listing_from_cache(repo_id, revision, cache_dir) if use_cache else None
    snap: Path | None = None
    if cached is not None:
        snap, files = cached
        source = "hf-cache"
        _log(f"{label}: {len(files)} files from the Hugging Face cache {snap}")
        start()
        _materialise(snap, files, tmp, label)
    else:
        from huggingface_hub import HfApi, snapshot_download

        api = api or HfApi(endpoint=endpoint, token=token)
        listing = _listing_from_hub(api, repo_id, revision, endpoint)
        chosen = select_files(listing)
        _check_complete(f"{label} on the Hub", chosen)
        files = {n: listing[n] for n in chosen}
        total = sum(e["size"] for e in files.values())
        _log(f"{label}: {len(files)} files, {_fmt_bytes(total)}, into {tmp}")
        _check_disk(label, tmp, files)
        source = "hub"
        start()
        download = download or snapshot_download
        try:
            download(
                repo_id,
                revision=revision,
                local_dir=str(tmp),
                allow_patterns=[glob.escape(f) for f in chosen],
                token=token,
                endpoint=endpoint,
            )
        except Exception as exc:
            _raise_explained(exc, repo_id, revision, endpoint)

    hashed = _verify(tmp, files, label, full=True, cache=snap)
    files = {name: dict(entry, sha256=hashed[name]) for name, entry in files.items()}
    _check_complete(label, files, tmp)
    shutil.rmtree(tmp / ".cache", ignore_errors=True)  # huggingface_hub's download metadata: done with it
    extra = sorted(p.name for p in tmp.iterdir() if p.name not in files and p.name != RECORD)
    for name in extra:  # never ship a file the listing did not name
        p = tmp / name
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    atomic_write_json(
        tmp / RECORD, {"format": FORMAT, "repo_id": repo_id, "revision": revision, "source": source, "files": files}
    )
    if out_dir.is_dir():  # an empty folder (e.g. made by the workflow manager) is replaced
        out_dir.rmdir()
    os.replace(tmp, out_dir)
    _log(f"{out_dir}: {repo_id} at {revision} ({len(files)} files)")
    return out_dir


# ------------------------------------------------------------------------------------------------ records


def model_record(model_dir: Path | str, expect_revision: str | None = None) -> dict[str, Any]:
    """What a cell records of the model folder it measured: the revision (None for a built or local model), and a
    manifest hash over every file's name, size and content id, with the file count and bytes.

    Cheap: files of at most 16 MiB (configs, tokenizers) are hashed; a larger file takes the sha256 the Hub
    listed for it, from the fetch record, after its size is checked. A large file without a record (a built or
    local model) is hashed in full once per call. A fetched file whose size differs from its record, or a
    record whose revision is not expect_revision, is a one-line error."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise SpecsweepError(f"model folder {model_dir}: does not exist")
    rec = read_record(model_dir)
    recorded = rec["files"] if rec else {}
    if expect_revision is not None and (rec or {}).get("revision") != expect_revision:
        have = (rec or {}).get("revision") or "no fetch record"
        raise SpecsweepError(
            f"model folder {model_dir}: holds revision {have}, the config pins {expect_revision} "
            "(remove the folder to fetch it)"
        )
    manifest = []
    total = 0
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        if rel == RECORD or any(part.startswith(".") for part in Path(rel).parts):
            continue
        size = path.stat().st_size
        want = recorded.get(rel)
        if want is not None and want["size"] != size:
            raise SpecsweepError(
                f"model folder {model_dir}: {rel} has {size} bytes, its fetch record says {want['size']} "
                "(fetch it again)"
            )
        if size > SMALL_FILE and want is not None and want.get("sha256"):
            digest = want["sha256"]
        else:
            digest = file_sha256(path)
        manifest.append([rel, size, digest])
        total += size
    for rel in recorded:
        if not (model_dir / rel).is_file():
            raise SpecsweepError(
                f"model folder {model_dir}: {rel} named by its fetch record is missing (fetch it again)"
            )
    return {
        "revision": rec.get("revision") if rec else None,
        "repo_id": rec.get("repo_id") if rec else None,
        "manifest_sha256": sha256_obj(manifest),
        "files": len(manifest),
        "bytes": total,
    }


def stale_fetches(models: dict[str, tuple[str, str]], root: Path | str = MODELS) -> None:
    """At workflow parse time: a fetched folder whose record names another repo or revision than the config's
    would be measured silently (its mtime says it is up to date). One line naming it instead."""
    for name, (repo_id, revision) in sorted(models.items()):
        folder = Path(root) / name
        if not folder.is_dir() or not any(folder.iterdir()):
            continue
        rec = read_record(folder)
        if rec is None:
            raise SpecsweepError(
                f"model folder {folder}: has no {RECORD}, so its revision is unknown; "
                f"remove it to fetch {repo_id} at {revision}"
            )
        if (rec.get("repo_id"), rec.get("revision")) != (repo_id, revision):
            raise SpecsweepError(
                f"model folder {folder}: holds {rec.get('repo_id')} at {rec.get('revision')}, the config pins "
                f"{repo_id} at {revision}; remove the folder to fetch the pinned revision"
            )
