"""Prometheus text exposition in prometheus_client's format, with vLLM V1's metrics.

Counters are exposed as `<name>_total` plus a `<name>_created` gauge, histograms as
`_bucket{le=...}`, `_count`, `_sum` plus `_created`; labels are sorted by name in every
sample line, and floats use prometheus_client's formatting (`1.0`, `1.7e+09`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

LabelValues = tuple[str, ...]


def format_float(value: float) -> str:
    """prometheus_client's floatToGoString."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if value != value:
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{key}="{_escape(value)}"' for key, value in sorted(pairs.items()))
    return "{" + inner + "}"


@dataclass
class _Metric:
    name: str
    documentation: str
    labelnames: tuple[str, ...]
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    created: dict[LabelValues, float] = field(default_factory=dict)

    def _key(self, labels: dict[str, str]) -> LabelValues:
        return tuple(str(labels[name]) for name in self.labelnames)

    def _pairs(self, key: LabelValues) -> dict[str, str]:
        return dict(zip(self.labelnames, key, strict=True))

    def _created_block(self) -> list[str]:
        lines = [f"# HELP {self.name}_created {self.documentation}", f"# TYPE {self.name}_created gauge"]
        for key, stamp in self.created.items():
            lines.append(f"{self.name}_created{_labels(self._pairs(key))} {format_float(stamp)}")
        return lines


@dataclass
class Counter(_Metric):
    values: dict[LabelValues, float] = field(default_factory=dict)

    def labels_init(self, **labels: str) -> None:
        key = self._key(labels)
        with self.lock:
            self.values.setdefault(key, 0.0)
            self.created.setdefault(key, time.time())

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self.lock:
            self.values[key] = self.values.get(key, 0.0) + amount
            self.created.setdefault(key, time.time())

    def get(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        with self.lock:
            lines = [f"# HELP {self.name}_total {self.documentation}", f"# TYPE {self.name}_total counter"]
            for key, value in self.values.items():
                lines.append(f"{self.name}_total{_labels(self._pairs(key))} {format_float(value)}")
            return lines + self._created_block()


@dataclass
class Gauge(_Metric):
    values: dict[LabelValues, float] = field(default_factory=dict)

    def set(self, value: float, **labels: str) -> None:
        with self.lock:
            self.values[self._key(labels)] = float(value)

    def render(self) -> list[str]:
        with self.lock:
            lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} gauge"]
            for key, value in self.values.items():
                lines.append(f"{self.name}{_labels(self._pairs(key))} {format_float(value)}")
            return lines


@dataclass
class Histogram(_Metric):
    buckets: tuple[float, ...] = ()
    counts: dict[LabelValues, list[int]] = field(default_factory=dict)
    sums: dict[LabelValues, float] = field(default_factory=dict)

    def labels_init(self, **labels: str) -> None:
        key = self._key(labels)
        with self.lock:
            self.counts.setdefault(key, [0] * (len(self.buckets) + 1))
            self.sums.setdefault(key, 0.0)
            self.created.setdefault(key, time.time())

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self.lock:
            counts = self.counts.setdefault(key, [0] * (len(self.buckets) + 1))
            self.created.setdefault(key, time.time())
            for index, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[index] += 1
            counts[-1] += 1
            self.sums[key] = self.sums.get(key, 0.0) + value

    def render(self) -> list[str]:
        with self.lock:
            lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} histogram"]
            for key, counts in self.counts.items():
                pairs = self._pairs(key)
                for bound, count in zip(self.buckets + (math.inf,), counts, strict=True):
                    lines.append(
                        f"{self.name}_bucket{_labels({**pairs, 'le': format_float(bound)})} "
                        f"{format_float(float(count))}"
                    )
                lines.append(f"{self.name}_count{_labels(pairs)} {format_float(float(counts[-1]))}")
                lines.append(f"{self.name}_sum{_labels(pairs)} {format_float(self.sums[key])}")
            return lines + self._created_block()


TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
FINISHED_REASONS = ("stop", "length", "abort")


class VllmMetrics:
    """vLLM V1's Prometheus metrics for one engine (labels `model_name`, `engine`)."""

    def __init__(self, model_name: str, num_speculative_tokens: int | None, cache_config: dict[str, str]) -> None:
        self.base = {"model_name": model_name, "engine": "0"}
        base_names = ("model_name", "engine")
        self.num_requests_running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", base_names
        )
        self.num_requests_waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", base_names
        )
        self.kv_cache_usage_perc = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", base_names
        )
        self.cache_config_info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            tuple(["engine"] + sorted(cache_config)),
        )
        self.num_preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", base_names
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", base_names)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", base_names)
        self.request_success = Counter(
            "vllm:request_success", "Count of successfully processed requests.", base_names + ("finished_reason",)
        )
        self.time_to_first_token = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            base_names,
            buckets=TTFT_BUCKETS,
        )
        self.inter_token_latency = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            base_names,
            buckets=ITL_BUCKETS,
        )
        self.e2e_request_latency = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            base_names,
            buckets=E2E_BUCKETS,
        )
        self.ordered: list[Counter | Gauge | Histogram] = [
            self.num_requests_running,
            self.num_requests_waiting,
            self.kv_cache_usage_perc,
            self.num_preemptions,
            self.prompt_tokens,
            self.generation_tokens,
            self.request_success,
            self.time_to_first_token,
            self.inter_token_latency,
            self.e2e_request_latency,
            self.cache_config_info,
        ]
        self.speculative = num_speculative_tokens is not None
        if num_speculative_tokens is not None:
            # Registered only when speculation is configured (vLLM SpecDecodingProm).
            self.spec_num_drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", base_names)
            self.spec_num_draft_tokens = Counter(
                "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", base_names
            )
            self.spec_num_accepted_tokens = Counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", base_names
            )
            self.spec_accepted_per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                base_names + ("position",),
            )
            self.ordered += [
                self.spec_num_drafts,
                self.spec_num_draft_tokens,
                self.spec_num_accepted_tokens,
                self.spec_accepted_per_pos,
            ]
            for counter in (self.spec_num_drafts, self.spec_num_draft_tokens, self.spec_num_accepted_tokens):
                counter.labels_init(**self.base)
            for position in range(num_speculative_tokens):
                self.spec_accepted_per_pos.labels_init(**self.base, position=str(position))
        self.num_requests_running.set(0, **self.base)
        self.num_requests_waiting.set(0, **self.base)
        self.kv_cache_usage_perc.set(0, **self.base)
        self.cache_config_info.set(1.0, engine="0", **cache_config)
        for counter in (self.num_preemptions, self.prompt_tokens, self.generation_tokens):
            counter.labels_init(**self.base)
        for reason in FINISHED_REASONS:
            self.request_success.labels_init(**self.base, finished_reason=reason)
        for histogram in (self.time_to_first_token, self.inter_token_latency, self.e2e_request_latency):
            histogram.labels_init(**self.base)

    def render(self) -> str:
        lines: list[str] = []
        for metric in self.ordered:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
