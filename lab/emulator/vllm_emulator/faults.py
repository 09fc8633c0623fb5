"""Fault switches for failures that cannot arise by themselves in the lab.

Read once at process start from a JSON file (env `SPECFLEET_EMULATOR_FAULTS_FILE`,
default `/run/specfleet-lab/faults.json`; absent means no faults):

- `crash_after_requests: N`  the process exits hard after N completed requests
- `never_ready: true`         the process runs but the port never listens
- `hang_mid_stream_after_tokens: N`  the engine stalls for good once a request has
  streamed N tokens (every open stream stops; /health still answers, as with a wedged GPU)
- `startup_delay_s: S`        extra startup time (emulated seconds, scaled like the rest)
- `drafter_unbudgeted_mib: M` a speculative server also holds M MiB outside vLLM's budget
  at start (the draft-memory pitfall, vllm#9995: draft weights and activations not
  counted), so it fails its free-memory check where the baseline starts
- `reject_speculative_config: true`  the runtime rejects any --speculative-config the way
  an older vLLM rejects a method its SpeculativeConfig does not know
- `output_divergence: "tie"`  from the first near-tie (the baseline's top-2 within 0.05 in
  logprob) at or after `divergence_after_tokens` in each answer, the server emits the
  second-best token there and continues from the changed prefix: a numerics tie, as real
  GPUs flip greedy choices with batch shape (vLLM's "Lossless guarantees" caveat)
- `output_divergence: "confident"`  at `divergence_after_tokens` (the first position from
  there where the baseline led by >= 2.0) the server emits a token the baseline ranked far
  below its top alternatives: a real divergence, not a tie
- `divergence_after_tokens: N`  where the divergences start (default 8)
- `unstable_outputs: true`  the same request is answered differently on repeated sends: the
  n-th request of the process takes the second-best token at position
  `divergence_after_tokens + n mod (answer length - divergence_after_tokens)`
  (non-determinism at temperature 0); logprobs.py models all three
- `unstable_outputs: "tie"`  the same, only at a numerics tie: every other request of the
  process takes the second-best token at its first near-tie from `divergence_after_tokens` on
- `logprobs_without_drafting: true`  a request that asks for logprobs is decoded without
  speculation (the drafter proposes nothing for it, the counters do not move): vLLM before
  about 0.14 served such requests without speculative decoding (vllm-project/vllm#34497)
- `batched_divergence: true`  a speculative server whose answers diverge confidently (as
  `output_divergence: "confident"`) when the request arrives while another is in flight: a
  speculation bug that shows only in a batch (a baseline server ignores it)
- `cache_hit_flips: true`  an answer whose prefill the prefix cache served (the same rendered
  prompt and `cache_salt` seen before by this process) takes the second-best token at its first
  near-tie from `divergence_after_tokens` on: a cache hit that tips a near-tie (prefill numerics
  differ with and without cached blocks)
- `loaded_draft_slowdown: F`  a step in which more than one sequence drafts takes F times as
  long (F >= 1): speculation that pays for one request at a time and loses under load, as a
  verify path that leaves its fast kernels past batch 1 does (vLLM issues #27379, #31014); a
  step drafting for one sequence, or none (a per-batch-size table's k = 0 band), is unchanged
- `draft_acceptance: {"chat": [0.16, 0.02, 0.01]}`  per workload (code_edit, structured,
  chat), the per-position acceptance the server drafts with instead of its calibrated curve
  (perfmodel.py; longer k continue the given curve): a head that drafts poorly on that traffic
  (trained on other data, or another chat template), so speculation slows that workload down
- `piecewise_gap_us: G`  a server whose CUDA graphs run PIECEWISE (vLLM's V1 model runner
  with a per-batch-size table, or cudagraph_mode PIECEWISE) loses G microseconds at each decoder
  layer's graph boundary per forward pass (G >= 0; default perfmodel.PIECEWISE_GAP_S, 12): a
  host whose graph boundaries cost more (a slower CPU or power mode; vllm-project/vllm#49652
  and #49986 report 7-30% on datacenter GPUs)
- `only_when_speculating: true`  every switch above applies only to a server started
  with --speculative-config (a drafter crash, a speculative-only hang); the baseline runs clean
- `only_when_baseline: true`  the reverse: only a server without --speculative-config
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .perfmodel import WORKLOADS

DEFAULT_FAULTS_FILE = "/run/specfleet-lab/faults.json"
DEFAULT_DIVERGENCE_AFTER_TOKENS = 8
OUTPUT_DIVERGENCES = ("tie", "confident")
UNSTABLE_TIE = "tie"


@dataclass(frozen=True)
class Faults:
    crash_after_requests: int | None = None
    never_ready: bool = False
    hang_mid_stream_after_tokens: int | None = None
    startup_delay_s: float = 0.0
    drafter_unbudgeted_mib: int | None = None
    reject_speculative_config: bool = False
    output_divergence: str | None = None
    divergence_after_tokens: int = DEFAULT_DIVERGENCE_AFTER_TOKENS
    unstable_outputs: bool | str = False  # True, or UNSTABLE_TIE
    loaded_draft_slowdown: float = 1.0
    draft_acceptance: tuple[tuple[str, tuple[float, ...]], ...] = ()
    piecewise_gap_us: float | None = None
    logprobs_without_drafting: bool = False
    batched_divergence: bool = False
    cache_hit_flips: bool = False
    only_when_speculating: bool = False
    only_when_baseline: bool = False

    def acceptance_for(self, workload: str) -> tuple[float, ...] | None:
        """The per-position acceptance `draft_acceptance` gives ``workload``, or None."""
        return dict(self.draft_acceptance).get(workload)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def any(self) -> bool:
        return self != Faults()


def parse_faults(data: Any) -> Faults:
    if data is None:
        return Faults()
    if not isinstance(data, dict):
        raise ValueError("faults file must hold a JSON object")
    unknown = set(data) - {
        "crash_after_requests", "never_ready", "hang_mid_stream_after_tokens", "startup_delay_s",
        "drafter_unbudgeted_mib", "reject_speculative_config", "output_divergence", "divergence_after_tokens",
        "unstable_outputs", "loaded_draft_slowdown", "draft_acceptance", "piecewise_gap_us",
        "logprobs_without_drafting", "batched_divergence", "cache_hit_flips",
        "only_when_speculating", "only_when_baseline",
    }
    if unknown:
        raise ValueError(f"unknown fault switches: {', '.join(sorted(unknown))}")

    def optional_count(key: str) -> int | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be a non-negative integer")
        return value

    divergence = data.get("output_divergence")
    if divergence is not None and divergence not in OUTPUT_DIVERGENCES:
        raise ValueError(f"output_divergence must be one of {', '.join(OUTPUT_DIVERGENCES)} (or null)")
    after = optional_count("divergence_after_tokens")
    delay = data.get("startup_delay_s", 0) or 0
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise ValueError("startup_delay_s must be a non-negative number")
    slowdown = data.get("loaded_draft_slowdown", 1.0)
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or slowdown < 1:
        raise ValueError("loaded_draft_slowdown must be a number >= 1")
    unstable = data.get("unstable_outputs", False)
    if unstable not in (True, False, UNSTABLE_TIE):
        raise ValueError(f'unstable_outputs must be true, false or "{UNSTABLE_TIE}"')
    if data.get("only_when_speculating") and data.get("only_when_baseline"):
        raise ValueError("only_when_speculating and only_when_baseline exclude each other")
    gap = data.get("piecewise_gap_us")
    if gap is not None and (isinstance(gap, bool) or not isinstance(gap, (int, float)) or gap < 0):
        raise ValueError("piecewise_gap_us must be a non-negative number")
    return Faults(
        crash_after_requests=optional_count("crash_after_requests"),
        never_ready=bool(data.get("never_ready", False)),
        hang_mid_stream_after_tokens=optional_count("hang_mid_stream_after_tokens"),
        startup_delay_s=float(delay),
        drafter_unbudgeted_mib=optional_count("drafter_unbudgeted_mib"),
        reject_speculative_config=bool(data.get("reject_speculative_config", False)),
        output_divergence=divergence,
        divergence_after_tokens=DEFAULT_DIVERGENCE_AFTER_TOKENS if after is None else after,
        unstable_outputs=unstable,
        loaded_draft_slowdown=float(slowdown),
        draft_acceptance=_draft_acceptance(data.get("draft_acceptance")),
        piecewise_gap_us=None if gap is None else float(gap),
        logprobs_without_drafting=bool(data.get("logprobs_without_drafting", False)),
        batched_divergence=bool(data.get("batched_divergence", False)),
        cache_hit_flips=bool(data.get("cache_hit_flips", False)),
        only_when_speculating=bool(data.get("only_when_speculating", False)),
        only_when_baseline=bool(data.get("only_when_baseline", False)),
    )


def _draft_acceptance(value: Any) -> tuple[tuple[str, tuple[float, ...]], ...]:
    """`draft_acceptance`, checked: workload -> a non-empty, non-increasing list of rates in [0, 1]."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ValueError("draft_acceptance must be an object: workload -> per-position acceptance list")
    curves = []
    for workload, rates in sorted(value.items()):
        if workload not in WORKLOADS:
            raise ValueError(f"draft_acceptance: unknown workload {workload!r} (one of {', '.join(WORKLOADS)})")
        if (not isinstance(rates, list) or not rates
                or any(isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1 for r in rates)
                or any(later > earlier for earlier, later in zip(rates, rates[1:], strict=False))):
            raise ValueError(f"draft_acceptance.{workload} must be a non-empty, non-increasing list of rates in [0, 1]")
        curves.append((workload, tuple(float(r) for r in rates)))
    return tuple(curves)


def for_server(faults: Faults, speculating: bool) -> Faults:
    """The switches that apply to this server (see `only_when_speculating`, `only_when_baseline`)."""
    if (faults.only_when_speculating and not speculating) or (faults.only_when_baseline and speculating):
        return Faults()
    return faults


def faults_file_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("SPECFLEET_EMULATOR_FAULTS_FILE", DEFAULT_FAULTS_FILE))


def load_faults(env: Mapping[str, str]) -> Faults:
    path = faults_file_path(env)
    if not path.is_file():
        return Faults()
    text = path.read_text().strip()
    return parse_faults(json.loads(text) if text else None)
