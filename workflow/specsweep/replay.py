"""Acceptance replay: the K and alpha a model-free drafter (ngram prompt lookup, suffix decoding) would get on
recorded traffic, computed on a CPU without the model.

Under greedy verification a drafted token is accepted exactly when it equals the token the target model emits
at that position, so the acceptance of a drafter that needs no model depends only on the (prompt, response)
pairs. Replay walks each response the way vLLM's engine does:

- the first response token comes from prefill (no draft);
- after each step the drafter proposes from prompt + response so far; the next step accepts the longest draft
  prefix that equals the response there and emits accepted + 1 tokens (the bonus or corrected token).

The drafters are vLLM's own code, not re-implementations: for ngram,
``vllm.v1.spec_decode.ngram_proposer._find_longest_matched_ngram_and_propose_tokens`` (what
``NgramProposer.batch_propose`` runs per request); for suffix, arctic_inference's ``SuffixDecodingCache``
driven the way ``vllm/v1/spec_decode/suffix_decoding.py`` drives it (``start_request`` with the prompt,
``add_active_response`` with each step's sampled tokens, ``speculate`` on the last ``max_tree_depth`` tokens,
``stop_request`` once the request has left the batch).

Counting follows vLLM's metrics (``SpecDecodingStats.observe_draft``): a step with a non-empty draft is one
draft; K = 1 + accepted / drafts; alpha = accepted / drafted tokens; acceptance at position i = drafts whose
first i + 1 tokens were accepted / drafts.

What replay cannot reproduce exactly, and why:

- A draft that runs past the end of a response. A response cut by max_tokens (or ended by EOS) does not say
  which tokens the model would have emitted after it; vLLM verifies (and counts as accepted) draft tokens past
  the cut and then drops them. Replay fills those positions in with the drafter's acceptance there on the
  other drafts (past_end_fill) and reports the bounds (none or all of them accepted).
- Batch interleaving of the suffix cache. The global suffix tree holds the responses of all requests in the
  cache, including the partial responses of requests still running (``add_active_response`` extends the
  global tree too). Replay steps the requests in lockstep (``schedule="lockstep"``: every running request
  advances one engine step at a time, in admission order, as vLLM's batch does when all requests fit), or one
  request after another in the order a real run finished them (``schedule="finish"``: the global cache holds
  the complete earlier responses, none of the concurrent partial ones). The lockstep schedule follows vLLM's
  token budget (running requests first, then chunked prefills) and max_num_seqs, but not preemption, nor the
  batch order after vLLM condenses its input batch when a request finishes. It was validated against
  engines without async scheduling (the CPU profile's); how async scheduling changes drafting is not modelled.
- Text responses. A response given as text is re-tokenised; the model's own token ids may tokenise
  differently (the same text, other tokens). Give ``response_token_ids`` where they are known.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import SPEC_METHODS
from .errors import SpecsweepError
from .jsonio import open_bounded

FORMAT = "specsweep-replay/1"
#: vLLM's defaults (vllm/config/speculative.py): ngram's lookup window when neither bound is given, and the
#: suffix decoder's settings.
NGRAM_DEFAULT_LOOKUP = 5
SUFFIX_DEFAULTS = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
    "suffix_decoding_max_cached_requests": 10000,
}
#: The context limit when none is given: large enough that no request reaches it.
UNBOUNDED_LEN = 1 << 30
#: The drafter's integer settings: (lowest, highest, may be None before vLLM's defaults are filled in). The
#: highest values are far above any vLLM runs with; they keep a typo from sizing the replay's per-position
#: counts by it.
_DRAFTER_INTS = {
    "num_speculative_tokens": (1, 1024, True),
    "prompt_lookup_min": (1, UNBOUNDED_LEN, True),
    "prompt_lookup_max": (1, UNBOUNDED_LEN, True),
    "suffix_decoding_max_tree_depth": (1, 1024, False),
    "suffix_decoding_max_cached_requests": (0, UNBOUNDED_LEN, False),
    "max_model_len": (1, UNBOUNDED_LEN, False),
}
#: The drafter's real settings: (lowest, highest), finite.
_DRAFTER_FLOATS = {"suffix_decoding_max_spec_factor": (0.0, 1e6), "suffix_decoding_min_token_prob": (0.0, 1.0)}


@dataclass(frozen=True)
class Drafter:
    """The drafter settings of vLLM's speculative_config that change what is drafted."""

    method: str
    num_speculative_tokens: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1
    suffix_decoding_max_cached_requests: int = 10000
    max_model_len: int = UNBOUNDED_LEN

    def resolved(self) -> Drafter:
        """The settings as vLLM resolves them (its defaults filled in), checked: one line naming the field."""
        if not isinstance(self.method, str) or self.method not in SPEC_METHODS:
            raise SpecsweepError(f"drafter method {self.method!r}: replay knows {' and '.join(SPEC_METHODS)}")
        for name, (least, most, optional) in _DRAFTER_INTS.items():
            v = getattr(self, name)
            if v is None and optional:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or not least <= v <= most:
                raise SpecsweepError(f"drafter {name} {v!r}: not an integer in [{least}, {most}]")
        for name, (low, high) in _DRAFTER_FLOATS.items():
            x = getattr(self, name)
            if not _real(x, low, high):
                raise SpecsweepError(f"drafter {name} {x!r}: not a finite number in [{low:g}, {high:g}]")
        k = self.num_speculative_tokens
        if self.method == "suffix":
            k = self.suffix_decoding_max_tree_depth if k is None else k  # vLLM's default
            lo, hi = None, None
        else:
            lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
            if lo is None and hi is None:
                lo = hi = NGRAM_DEFAULT_LOOKUP
            lo = hi if lo is None else lo
            hi = lo if hi is None else hi
            assert lo is not None and hi is not None
            if lo < 1 or lo > hi:
                raise SpecsweepError(f"prompt_lookup_min={lo}, prompt_lookup_max={hi}: need 1 <= min <= max")
        if k is None or k < 1:
            raise SpecsweepError(f"num_speculative_tokens={k}: must be >= 1 (ngram has no default)")
        return Drafter(
            self.method,
            k,
            lo,
            hi,
            self.suffix_decoding_max_tree_depth,
            self.suffix_decoding_max_spec_factor,
            self.suffix_decoding_min_token_prob,
            self.suffix_decoding_max_cached_requests,
            self.max_model_len,
        )

    @classmethod
    def from_speculative(cls, spec: dict[str, Any], max_model_len: int | None = None) -> Drafter:
        """From a cell's settings.ladder.speculative (vLLM's speculative_config keys)."""
        known = {f for f in cls.__dataclass_fields__ if f not in ("max_model_len",)}
        kwargs = {k: v for k, v in spec.items() if k in known}
        return cls(**kwargs, max_model_len=UNBOUNDED_LEN if max_model_len is None else max_model_len).resolved()


@dataclass
class Request:
    """One recorded request: its prompt's and response's token ids, and (when known) its finish rank."""

    prompt: list[int]
    response: list[int]
    finish_order: int | None = None
    name: str = ""


@dataclass
class RequestResult:
    """What the drafter did on one request (vLLM's counting: a draft is a step with a non-empty proposal)."""

    name: str
    prompt_tokens: int
    response_tokens: int
    steps: int = 0  # engine steps that emitted tokens, the prefill step included
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    #: drafts that matched the response to its end and ran past it: [tokens matched, positions past the end]
    past_end: list[list[int]] = field(default_factory=list)
    #: over the other drafts: how many reached position i (had a token there, all before it accepted), and
    #: how many of those were accepted there (the conditional acceptance that fills in past the end)
    reached_per_pos: list[int] = field(default_factory=list)
    passed_per_pos: list[int] = field(default_factory=list)

    @property
    def K(self) -> float | None:
        """K over the response's tokens only (a draft's positions past the response's end count as rejected)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def alpha(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def as_dict(self) -> dict[str, Any]:
        per_pos = [a / self.drafts if self.drafts else None for a in self.accepted_per_pos]
        return asdict(self) | {"K": self.K, "alpha": self.alpha, "acceptance_per_pos": per_pos}


# ---------------------------------------------------------------------------------------------- the drafters


class _Ngram:
    """vLLM's ngram prompt lookup, per request (NgramProposer.batch_propose calls the same function)."""

    def __init__(self, d: Drafter) -> None:
        from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

        self._find = _find_longest_matched_ngram_and_propose_tokens
        self.d = d

    def start(self, rid: int, prompt: np.ndarray) -> None:
        pass

    def propose(self, rid: int, context: np.ndarray, sampled: np.ndarray) -> list[int]:
        if len(context) >= self.d.max_model_len:  # NgramProposer.propose skips requests at the limit
            return []
        out = self._find(context, self.d.prompt_lookup_min, self.d.prompt_lookup_max, self.d.max_model_len,
                         self.d.num_speculative_tokens)  # fmt: skip
        return [int(t) for t in out]

    def stop(self, rid: int) -> None:
        pass


class _Suffix:
    """arctic_inference's suffix cache, driven as vllm/v1/spec_decode/suffix_decoding.py drives it."""

    def __init__(self, d: Drafter) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.d = d
        self.cache = SuffixDecodingCache(
            max_tree_depth=d.suffix_decoding_max_tree_depth,
            max_cached_requests=d.suffix_decoding_max_cached_requests,
        )

    def start(self, rid: int, prompt: np.ndarray) -> None:
        if rid in self.cache.cached_requests:
            self.cache.evict_cached_response(rid)
        self.cache.start_request(rid, prompt)

    def propose(self, rid: int, context: np.ndarray, sampled: np.ndarray) -> list[int]:
        num_tokens = len(context)
        if num_tokens >= self.d.max_model_len:
            return []
        self.cache.add_active_response(rid, sampled)
        start = max(0, num_tokens - self.d.suffix_decoding_max_tree_depth)
        assert self.d.num_speculative_tokens is not None
        draft = self.cache.speculate(
            rid,
            context[start:num_tokens],
            max_spec_tokens=min(self.d.num_speculative_tokens, self.d.max_model_len - num_tokens - 1),
            max_spec_factor=self.d.suffix_decoding_max_spec_factor,
            min_token_prob=self.d.suffix_decoding_min_token_prob,
        )
        return [int(t) for t in draft.token_ids]

    def stop(self, rid: int) -> None:
        self.cache.stop_request(rid)


# ---------------------------------------------------------------------------------------------- the replay


@dataclass
class ReplayRun:
    """A replay's per-request results and the engine steps its schedule took (lockstep: the steps a batch
    with that admission, budget and drafter would run; finish: the sum over requests run one by one)."""

    results: list[RequestResult]
    engine_steps: int


def replay(
    requests: Sequence[Request], drafter: Drafter, schedule: str = "lockstep", concurrency: int | None = None
) -> list[RequestResult]:
    """Replay the drafter over every response; results in the requests' order (see run_replay)."""
    return run_replay(requests, drafter, schedule, concurrency).results


def run_replay(
    requests: Sequence[Request],
    drafter: Drafter | None,
    schedule: str = "lockstep",
    concurrency: int | None = None,
    token_budget: int | None = None,
) -> ReplayRun:
    """Replay the drafter (None: no drafting, vanilla decoding) over every response.

    schedule "lockstep": requests are admitted in their order, up to `concurrency` at once (default: all, as a
    cell's timed pass submits them), and every running request advances one engine step at a time. With a
    token_budget (vLLM's max_num_batched_tokens) a step schedules the running requests first (1 + draft
    tokens each), then prefills waiting ones in chunks with what is left, as vLLM's scheduler does; a request's
    first token comes in the step that completes its prompt.
    schedule "finish": one request after another in finish order (Request.finish_order; the global suffix
    cache then holds every earlier response whole). For ngram the schedule changes nothing: it drafts from the
    request's own tokens only."""
    d = drafter.resolved() if drafter is not None else None
    if schedule not in ("lockstep", "finish"):
        raise SpecsweepError(f"replay schedule '{schedule}': lockstep or finish")
    if not requests:
        raise SpecsweepError("replay: no requests")
    order = list(range(len(requests)))
    if schedule == "finish":
        ranks = [r.finish_order for r in requests]
        if any(x is None for x in ranks):
            missing = next(r.name for r in requests if r.finish_order is None)
            raise SpecsweepError(f"replay schedule finish: request {missing} has no finish_order")
        order.sort(key=lambda i: (ranks[i], i))
        concurrency = 1
    width = len(requests) if concurrency is None else concurrency
    if width < 1:
        raise SpecsweepError(f"replay concurrency {concurrency}: must be >= 1")
    budget = token_budget if token_budget is not None else UNBOUNDED_LEN
    if budget < 1:
        raise SpecsweepError(f"replay token budget {token_budget}: must be >= 1")
    impl: _Ngram | _Suffix | None = None if d is None else (_Ngram(d) if d.method == "ngram" else _Suffix(d))
    results = [RequestResult(r.name, len(r.prompt), len(r.response)) for r in requests]
    for res in results:
        res.accepted_per_pos = [0] * ((d.num_speculative_tokens or 0) if d else 0)
        res.reached_per_pos = list(res.accepted_per_pos)
        res.passed_per_pos = list(res.accepted_per_pos)
    seqs = [np.asarray(list(r.prompt) + list(r.response), dtype=np.int32) for r in requests]
    waiting = list(order)
    running: list[int] = []  # in admission order
    prefill_left: dict[int, int] = {}  # prompt tokens not yet computed
    pos: dict[int, int] = {}  # response tokens emitted so far
    draft: dict[int, list[int]] = {}
    leaving: list[int] = []  # finished in the last step; stopped at the next propose (vLLM's order)
    engine_steps = 0
    while waiting or running:
        engine_steps += 1
        left = budget
        stepped: list[tuple[int, int]] = []  # (request, tokens emitted this step)
        for i in running:
            if left <= 0:
                break
            n_resp = len(requests[i].response)
            if i not in pos:  # (the rest of) its prefill: the first token when the prompt is complete
                chunk = min(left, prefill_left[i])
                prefill_left[i] -= chunk
                left -= chunk
                if prefill_left[i]:
                    continue
                emitted = 1
                pos[i] = 0
                if impl is not None:
                    impl.start(i, np.asarray(requests[i].prompt, dtype=np.int32))
            else:
                proposal, start = draft.pop(i, []), pos[i]
                proposal = proposal[: max(0, left - 1)]  # the scheduler trims drafts to the budget
                left -= 1 + len(proposal)
                target = requests[i].response[start : start + len(proposal)]
                accepted = 0
                while accepted < len(target) and proposal[accepted] == target[accepted]:
                    accepted += 1
                if proposal:
                    res = results[i]
                    res.drafts += 1
                    res.draft_tokens += len(proposal)
                    res.accepted += accepted
                    for p in range(accepted):
                        res.accepted_per_pos[p] += 1
                    if accepted == len(target) < len(proposal):  # unknown past the end: see past_end_fill
                        res.past_end.append([accepted, len(proposal) - accepted])
                    else:
                        for p in range(min(accepted + 1, len(proposal))):
                            res.reached_per_pos[p] += 1
                            res.passed_per_pos[p] += p < accepted
                emitted = min(accepted + 1, n_resp - start)
            results[i].steps += 1
            stepped.append((i, emitted))
        while waiting and len(running) < width and left > 0:  # admit and prefill with what is left
            i = waiting.pop(0)
            running.append(i)
            chunk = min(left, len(requests[i].prompt))
            prefill_left[i] = len(requests[i].prompt) - chunk
            left -= chunk
            if prefill_left[i] == 0:
                pos[i] = 0
                if impl is not None:
                    impl.start(i, np.asarray(requests[i].prompt, dtype=np.int32))
                results[i].steps += 1
                stepped.append((i, 1))
        if impl is not None:
            for i in leaving:  # vLLM stops a request in the first propose after it left the batch
                impl.stop(i)
        leaving = []
        for i, emitted in stepped:
            plen = len(requests[i].prompt)
            sampled = seqs[i][plen + pos[i] : plen + pos[i] + emitted]
            pos[i] += emitted
            context = seqs[i][: plen + pos[i]]
            proposal = impl.propose(i, context, sampled) if impl is not None else []
            if pos[i] >= len(requests[i].response):
                leaving.append(i)
            else:
                draft[i] = proposal
        running = [i for i in running if pos.get(i, 0) < len(requests[i].response)]
    if impl is not None:
        for i in leaving:
            impl.stop(i)
    return ReplayRun(results, engine_steps)


# ---------------------------------------------------------------------------------------------- the summary


def past_end_fill(results: Sequence[RequestResult]) -> list[float]:
    """Per request, the accepted tokens expected past the response's end.

    vLLM verifies a draft that runs past a response's end (max_tokens, or past EOS) against what the model
    computes there and counts what matches as accepted before it drops those tokens; the recorded response
    cannot say what that was. A draft that matched the response to its end and had e positions left is
    filled in with the acceptance the drafter had at those positions on the other drafts: the conditional
    acceptance q_i = (drafts accepted at position i) / (drafts that reached it), so the expected extra is
    sum over j = 1..e of q_m * ... * q_(m+j-1), m the tokens it matched."""
    width = max((len(r.reached_per_pos) for r in results), default=0)
    q: list[float] = []
    for i in range(width):
        reached = sum(r.reached_per_pos[i] for r in results)
        q.append(sum(r.passed_per_pos[i] for r in results) / reached if reached else 0.0)
    out = []
    for r in results:
        extra = 0.0
        for m, e in r.past_end:
            run = 1.0
            for i in range(m, m + e):
                run *= q[i] if i < len(q) else 0.0
                extra += run
        out.append(extra)
    return out


def summarize(results: Sequence[RequestResult], seed: int = 0, resamples: int = 2000) -> dict[str, Any]:
    """Overall K, alpha and acceptance per position, each with a 95 % percentile interval from a seeded
    bootstrap that resamples requests (the prompts are the sampling unit: a workload is a sample of them).

    K and alpha include the acceptance expected past the responses' ends (past_end_fill), as vLLM's counters
    do; K_bounds holds K with none and with all of those positions accepted; K_in_response counts only the
    response's tokens. Acceptance per position counts the response's tokens only."""
    drafts = np.array([r.drafts for r in results], dtype=np.float64)
    drafted = np.array([r.draft_tokens for r in results], dtype=np.float64)
    raw = np.array([r.accepted for r in results], dtype=np.float64)
    fill = np.array(past_end_fill(results), dtype=np.float64)
    acc = raw + fill
    most = float(sum(e for r in results for _, e in r.past_end))
    per_pos = np.array([r.accepted_per_pos for r in results], dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(results), size=(resamples, len(results)))
    with np.errstate(invalid="ignore", divide="ignore"):
        k_b = 1.0 + acc[idx].sum(1) / drafts[idx].sum(1)
        a_b = acc[idx].sum(1) / drafted[idx].sum(1)
        pos_b = per_pos[idx].sum(1) / drafts[idx].sum(1)[:, None]

    def interval(values: np.ndarray) -> list[float | None]:
        v = values[np.isfinite(values)]
        if len(v) == 0:
            return [None, None]
        return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]

    total_d, total_t, total_a, total_raw = int(drafts.sum()), int(drafted.sum()), float(acc.sum()), int(raw.sum())
    return {
        "requests": len(results),
        "response_tokens": int(sum(r.response_tokens for r in results)),
        "steps": int(sum(r.steps for r in results)),
        "drafts": total_d,
        "draft_tokens": total_t,
        "accepted": total_a,
        "accepted_in_response": total_raw,
        "drafts_past_end": int(sum(len(r.past_end) for r in results)),
        "accepted_per_pos": [int(x) for x in per_pos.sum(0)],
        "K": 1.0 + total_a / total_d if total_d else None,
        "K_ci": interval(k_b),
        "K_in_response": 1.0 + total_raw / total_d if total_d else None,
        "K_bounds": [1.0 + total_raw / total_d, 1.0 + (total_raw + most) / total_d] if total_d else [None, None],
        "alpha": total_a / total_t if total_t else None,
        "alpha_ci": interval(a_b),
        "acceptance_per_pos": [float(x) / total_d if total_d else None for x in per_pos.sum(0)],
        "acceptance_per_pos_ci": [interval(pos_b[:, j]) for j in range(per_pos.shape[1])],
        "interval": f"95 % percentile bootstrap over requests, {resamples} resamples, seed {seed}",
    }


def report(
    run: ReplayRun, drafter: Drafter, schedule: str, source: str, seed: int = 0, vanilla_steps: int | None = None
) -> dict[str, Any]:
    """The replay document: settings, overall summary with intervals, the engine steps of the schedule (and,
    given the steps of the same schedule without drafting, the step ratio T), and every request."""
    overall = summarize(run.results, seed)
    overall["engine_steps"] = run.engine_steps
    overall["vanilla_engine_steps"] = vanilla_steps
    overall["T"] = vanilla_steps / run.engine_steps if vanilla_steps else None
    return {
        "format": FORMAT,
        "source": source,
        "drafter": asdict(drafter.resolved()),
        "schedule": schedule,
        "overall": overall,
        "per_request": [
            r.as_dict() | {"accepted_past_end_expected": fill}
            for r, fill in zip(run.results, past_end_fill(run.results), strict=True)
        ],
    }


def _count(value: Any, lo: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= lo


def _real(value: Any, lo: float, hi: float = math.inf) -> bool:
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and lo <= value <= hi
    )


def check_report(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` when it is a replay report (`specsweep replay --out`) whose fields the advisor reads have their
    types and ranges; else one line naming the first field that has not (T: a finite ratio > 0, K >= 1, ...)."""

    def bad(field: str, value: Any, want: str) -> SpecsweepError:
        return SpecsweepError(f"{where}: {field} is {str(value)[:60]!r}, not {want}")

    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SpecsweepError(f"{where}: not a replay report (format {FORMAT}: specsweep replay --out)")
    drafter = doc.get("drafter")
    if not isinstance(drafter, dict) or drafter.get("method") not in SPEC_METHODS:
        raise bad("drafter.method", drafter.get("method") if isinstance(drafter, dict) else drafter,
                  " or ".join(SPEC_METHODS))  # fmt: skip
    c = doc.get("concurrency")
    if c is not None and not _count(c, 1):
        raise bad("concurrency", c, "null or an integer >= 1")
    o = doc.get("overall")
    if not isinstance(o, dict):
        raise bad("overall", o, "an object")
    if not _count(o.get("requests"), 1):
        raise bad("overall.requests", o.get("requests"), "an integer >= 1")
    t = o.get("T")
    if t is not None and (not _real(t, 0.0) or t == 0):
        raise bad("overall.T", o.get("T"), "null or a finite ratio > 0")
    if o.get("K") is not None and not _real(o["K"], 1.0):
        raise bad("overall.K", o.get("K"), "null or a finite number >= 1")
    rows = doc.get("per_request")
    if not isinstance(rows, list) or len(rows) != o["requests"]:
        raise bad("per_request", f"{type(rows).__name__} of {len(rows) if isinstance(rows, list) else '?'}",
                  f"a list of overall.requests = {o['requests']} requests")  # fmt: skip
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise bad(f"per_request[{i}]", r, "an object")
        for key in ("response_tokens", "steps"):
            if not _count(r.get(key), 1):
                raise bad(f"per_request[{i}].{key}", r.get(key), "an integer >= 1")
    return doc


@functools.lru_cache(maxsize=512)
def plain_steps(
    shape: tuple[tuple[int, int, int | None], ...], schedule: str, concurrency: int | None, token_budget: int | None
) -> int:
    """The engine steps of a schedule without drafting, which depend on the requests' prompt and response
    lengths and finish ranks (`shape`) only, not on their tokens: computed once per shape (the repeats and
    drafters of one workload and b often share it)."""
    reqs = [Request([0] * p, [0] * r, f) for p, r, f in shape]
    return run_replay(reqs, None, schedule, concurrency, token_budget).engine_steps


def replay_report(
    requests: Sequence[Request],
    drafter: Drafter,
    schedule: str,
    concurrency: int | None,
    token_budget: int | None,
    source: str,
    seed: int = 0,
) -> dict[str, Any]:
    """Replay with and without the drafter on one schedule, and the report of it (T from the two), with the
    schedule's concurrency and token budget: what `specsweep replay` writes and `specsweep validate` compares."""
    run = run_replay(requests, drafter, schedule, concurrency, token_budget)
    shape = tuple((len(r.prompt), len(r.response), r.finish_order) for r in requests)
    doc = report(run, drafter, schedule, source, seed, plain_steps(shape, schedule, concurrency, token_budget))
    doc["concurrency"], doc["token_budget"] = concurrency, token_budget
    return doc


# ---------------------------------------------------------------------------------------------- traffic files


def _ids(value: Any, vocab: int, where: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise SpecsweepError(f"{where}: not a non-empty list of token ids")
    for t in value:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab:
            raise SpecsweepError(f"{where}: token id {t!r} is not an id of the tokenizer (0..{vocab - 1})")
    return list(value)


def load_traffic(path: Path, tokenizer: Any) -> list[Request]:
    """Read a traffic file into token ids; a bad line is a one-line error naming its number.

    A traffic file is JSON Lines, one request a line, in the forms datasets.py reads (vLLM's benchmark
    datasets' forms, the same files a `dataset` workload measures): a prompt as text (``prompt``, Spec-Bench's
    ``turns``, ShareGPT's ``conversations``: tokenised as the engine does, the tokenizer's special tokens
    added), as ``prompt_token_ids``, or as chat ``messages`` (put through the tokenizer's chat template with the
    generation prompt); and a recorded response: ``response`` text (tokenised without special tokens),
    ``response_token_ids`` (preferred: exact), ShareGPT's second turn or a last ``assistant`` message.
    Optional: ``finish_order``, the rank (0, 1, ...) in which the request finished in the real run; ``id``, a
    name for the request in the report. Blank lines are skipped."""
    from . import datasets

    path = Path(path)
    vocab = len(tokenizer)
    out: list[Request] = []
    for rec in datasets.read(path, "traffic file", noun="requests"):
        n = rec.line
        where = f"traffic file {path}: line {n}"
        if rec.prompt_token_ids is not None:
            prompt = _ids(list(rec.prompt_token_ids), vocab, f"{where}: prompt_token_ids")
        elif rec.messages is not None:
            if not getattr(tokenizer, "chat_template", None):
                raise SpecsweepError(f"{where}: messages given, but the tokenizer has no chat template")
            ids = tokenizer.apply_chat_template(list(rec.messages), tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            prompt = list(ids)
        else:
            prompt = list(tokenizer(rec.text)["input_ids"])
        if rec.response_token_ids is not None:
            response = _ids(list(rec.response_token_ids), vocab, f"{where}: response_token_ids")
        elif rec.response is not None:
            response = list(tokenizer(rec.response, add_special_tokens=False)["input_ids"])
            if not response:
                raise SpecsweepError(f"{where}: response tokenises to no tokens")
        else:
            raise SpecsweepError(
                f"{where}: no recorded response (response, response_token_ids, ShareGPT's second turn or a last "
                "assistant message): replay needs what the model answered"
            )
        if not prompt:
            raise SpecsweepError(f"{where}: the prompt tokenises to no tokens")
        out.append(Request(prompt, response, rec.finish_order, rec.id or f"line{n}"))
    return out


# ---------------------------------------------------------------------------------------------- cells

#: Stored beside a real-weight cell's JSON (r1.json -> r1.tokens.npz): what replay needs.
TOKENS_FORMAT = "specsweep-tokens/2"


def tokens_path(cell_path: Path) -> Path:
    return Path(cell_path).with_suffix(".tokens.npz")


def tokenizer_identity(tokenizer: Any) -> dict[str, Any]:
    """What must agree between the tokenizer a replay uses and the one that produced the cells' token ids."""
    special = {name: getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "unk")}
    return {
        "vocab_size": int(len(tokenizer)),
        "special_ids": {k: (int(v) if isinstance(v, int) else None) for k, v in special.items()},
    }


def _ragged(rows: Sequence[Sequence[int]], name: str) -> bytes:
    """Ragged token lists as one compressed npz: flat ids (uint16 where every id fits, else int32) and int64
    offsets."""
    import io

    lens = np.array([len(r) for r in rows], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    flat = np.fromiter((t for r in rows for t in r), dtype=np.int64, count=int(lens.sum()))
    small = flat.size == 0 or (flat.min() >= 0 and flat.max() < 1 << 16)
    buf = io.BytesIO()
    arrays = {f"{name}_ids": flat.astype(np.uint16 if small else np.int32), f"{name}_offsets": offsets}
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
    return buf.getvalue()


def _unragged(path: Path, name: str) -> list[list[int]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, offsets = z[f"{name}_ids"], z[f"{name}_offsets"]
    except (OSError, ValueError, KeyError) as exc:
        raise SpecsweepError(f"token file {path}: unreadable ({type(exc).__name__})") from None
    return [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def load_tokenizer(path: Path) -> Any:
    """A tokenizer folder (tokenizer.json, tokenizer_config.json), as the engine loads it."""
    if not Path(path).is_dir():
        raise SpecsweepError(f"tokenizer {path}: not a folder")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises many kinds; say which file and why, on one line
        raise SpecsweepError(f"tokenizer {path}: cannot be loaded ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class CellSchedule:
    """What a cell's timed pass ran under, the defaults of its replay: requests in flight (the cell's b, else
    the engine's max_num_seqs), the token budget of a step and the context limit."""

    concurrency: int | None
    token_budget: int | None
    max_model_len: int | None


def cell_schedule(doc: dict[str, Any]) -> CellSchedule:
    engine = doc["settings"]["engine"]
    b = doc["settings"]["workload"].get("concurrency")
    return CellSchedule(
        engine.get("max_num_seqs") if b is None else b,
        engine.get("max_num_batched_tokens"),
        engine.get("max_model_len"),
    )


def load_cell(cell_path: Path, tokenizer: Any | None) -> tuple[list[Request], dict[str, Any], CellSchedule]:
    """A cell's requests, its drafter settings (settings.ladder.speculative) and what its timed pass ran
    under (cell_schedule)."""
    from . import cells

    doc = cells.load(Path(cell_path))
    spec = doc["settings"]["ladder"].get("speculative") or {}
    return cell_requests(Path(cell_path), doc, tokenizer), dict(spec), cell_schedule(doc)


def cell_requests(cell_path: Path, doc: dict[str, Any], tokenizer: Any | None = None) -> list[Request]:
    """A cell's recorded requests (from its token files), with the finish order when the cell has one; with a
    tokenizer, checked to be the one that produced them."""
    rec = doc.get("replay_tokens")
    if not rec:
        raise SpecsweepError(f"cell {cell_path}: records no token ids (cells measured before replay_tokens)")
    files = {}
    for key in ("file", "prompts_file"):
        path = Path(cell_path).parent / rec[key]
        if not path.is_file():
            raise SpecsweepError(f"cell {cell_path}: its token file {path} is missing")
        with open_bounded(path, "token file") as fh:
            data = fh.read()
        if hashlib.sha256(data).hexdigest() != rec[key.replace("file", "sha256")]:
            raise SpecsweepError(f"token file {path}: its sha256 is not the one its cell records")
        files[key] = path
    if tokenizer is not None:
        have = tokenizer_identity(tokenizer)
        for key in ("vocab_size", "special_ids"):
            if have[key] != rec["tokenizer"][key]:
                raise SpecsweepError(
                    f"tokenizer: {key} {have[key]} is not the cell's ({rec['tokenizer'][key]}, {cell_path}): "
                    "another tokenizer"
                )
    prompts, responses = _unragged(files["prompts_file"], "prompt"), _unragged(files["file"], "response")
    if len(prompts) != len(responses):
        raise SpecsweepError(f"cell {cell_path}: {len(prompts)} prompts but {len(responses)} responses")
    finish = (doc.get("requests") or {}).get("finish_order") or rec.get("finish_order")
    if finish is not None and len(finish) != len(prompts):
        finish = None
    return [
        Request(p, r, None if finish is None else int(finish[i]), f"p{i}")
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True))
    ]


def tokens_blob(
    cell_json: Path, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], tokenizer_id: dict[str, Any]
) -> tuple[dict[Path, bytes], dict[str, Any]]:
    """The token files of a cell at cell_json (path -> bytes) and the cell's `replay_tokens` record.

    The responses go beside the cell (r1.json -> r1.tokens.npz). The prompts' ids are the same for every
    config and repeat of a (model, workload), so they go once into the workload's folder, named by their
    content (prompts.<sha16>.npz): a run of 512 prompts x 2000 tokens keeps one copy per workload, not one per
    cell. Both hashes are recorded, so a cell and token files of another measurement never pass for a set."""
    cell_json = Path(cell_json)
    resp = _ragged(responses, "response")
    prom = _ragged(prompts, "prompt")
    prom_sha = hashlib.sha256(prom).hexdigest()
    prom_name = f"prompts.{prom_sha[:16]}.npz"
    files = {tokens_path(cell_json): resp, cell_json.parent.parent / prom_name: prom}
    record = {
        "format": TOKENS_FORMAT,
        "file": tokens_path(cell_json).name,
        "sha256": hashlib.sha256(resp).hexdigest(),
        "prompts_file": f"../{prom_name}",
        "prompts_sha256": prom_sha,
        "prompts": len(prompts),
        "tokenizer": tokenizer_id,
    }
    return files, record
