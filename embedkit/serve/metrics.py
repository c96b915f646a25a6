"""The server's counters, histograms and gauges, written in Prometheus's text exposition format 0.0.4.

Written by hand rather than with `prometheus_client`: the server needs three counter families,
three histograms and a few gauges, all updated from the event loop's one thread, so a plain dict
per family does it without locks and without another dependency. The format is the one of
https://prometheus.io/docs/instrumenting/exposition_formats/ (the tests read it back with
prometheus_client's own parser). Histogram buckets: latency uses prometheus_client's default
buckets (5 ms to 10 s); batch sizes use powers of two up to 2048 texts.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from embedkit.serve.dynamic_batcher import BatchStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
BATCH_BUCKETS = tuple(float(2**i) for i in range(12))  # 1 .. 2048 texts


class Histogram:
    """Counts per bucket (upper bounds, inclusive), their sum and count."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = tuple(sorted(buckets))
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: dict[str, str]) -> list[str]:
        out, total = [], 0
        for bound, count in zip((*self.buckets, math.inf), self.counts, strict=True):
            total += count
            le = "+Inf" if math.isinf(bound) else repr(float(bound))  # "5.0", as prometheus_client writes it
            out.append(f"{name}_bucket{_labels({**labels, 'le': le})} {total}")
        out.append(f"{name}_sum{_labels(labels)} {_number(self.sum)}")
        out.append(f"{name}_count{_labels(labels)} {self.count}")
        return out


class Metrics:
    """Everything /metrics shows. Update it from the event loop only (no locks)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], int] = {}  # (route, status) -> count
        self.latency: dict[str, Histogram] = {}  # route -> seconds
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)
        self.texts_embedded = 0
        self.prompt_tokens = 0
        self.truncated_texts = 0
        self.client_disconnects = 0  # requests whose client left before its answer: not server errors
        self.index_swaps = 0  # times the server moved to a newer version of its index
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}  # name -> (help, read)
        # every served model's own figures, by name (the first model's are this object's own)
        self.models: dict[str, Metrics] = {}
        self.memory: dict[str, int] = {}  # served model -> resident bytes its loading took (`Engine`)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        key = (route, str(status))
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.latency.get(route)
        if histogram is None:
            histogram = self.latency[route] = Histogram(LATENCY_BUCKETS)
        histogram.observe(seconds)

    def observe_batch(self, stats: BatchStats) -> None:
        self.batch_size.observe(stats.texts)
        self.batch_seconds.observe(stats.run_s)

    def count_texts(self, texts: int, tokens: int, truncated: int) -> None:
        self.texts_embedded += texts
        self.prompt_tokens += tokens
        self.truncated_texts += truncated

    def count_disconnect(self) -> None:
        self.client_disconnects += 1

    def count_index_swap(self) -> None:  # from the index thread: one int, atomic under the GIL
        self.index_swaps += 1

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A value read when /metrics is asked for (queue depth, readiness)."""
        self.gauges[name] = (help_text, read)

    def render(self) -> str:
        out: list[str] = []
        _family(out, "embedkit_requests_total", "counter", "HTTP requests answered, by route and status.")
        for (route, status), count in sorted(self.requests.items()):
            out.append(f"embedkit_requests_total{_labels({'route': route, 'status': status})} {count}")
        _family(out, "embedkit_request_duration_seconds", "histogram", "Time to answer a request, by route.")
        for route, histogram in sorted(self.latency.items()):
            out.extend(histogram.lines("embedkit_request_duration_seconds", {"route": route}))
        _family(out, "embedkit_batch_size", "histogram", "Texts in each batch run by the model.")
        out.extend(self.batch_size.lines("embedkit_batch_size", {}))
        _family(out, "embedkit_batch_duration_seconds", "histogram", "Time to run one batch.")
        out.extend(self.batch_seconds.lines("embedkit_batch_duration_seconds", {}))
        for name, value, help_text in (
            ("embedkit_texts_embedded_total", self.texts_embedded, "Texts embedded (requests and queries)."),
            ("embedkit_prompt_tokens_total", self.prompt_tokens, "Tokens of the texts embedded."),
            ("embedkit_truncated_texts_total", self.truncated_texts, "Texts cut at the model's max length."),
            (
                "embedkit_client_disconnects_total",
                self.client_disconnects,
                "Requests whose client closed the connection before the answer (counted as 499).",
            ),
            (
                "embedkit_index_swaps_total",
                self.index_swaps,
                "Times the server moved to a newer index.",
            ),
        ):
            _family(out, name, "counter", help_text)
            out.append(f"{name} {value}")
        for name, (help_text, read) in sorted(self.gauges.items()):
            _family(out, name, "gauge", help_text)
            out.append(f"{name} {_number(float(read()))}")
        if self.memory:
            name = "embedkit_model_memory_bytes"
            _family(out, name, "gauge", "Resident memory a served model's loading and first batch took.")
            out.extend(f"{name}{_labels({'model': model})} {size}" for model, size in self.memory.items())
        if self.models:
            self._render_models(out)
        return "\n".join(out) + "\n"

    def _render_models(self, out: list[str]) -> None:
        """Each served model's batch times and texts, labelled by model (several models served)."""
        name = "embedkit_model_batch_duration_seconds"
        _family(out, name, "histogram", "Time to run one batch, by served model.")
        for model, metrics in self.models.items():
            out.extend(metrics.batch_seconds.lines(name, {"model": model}))
        name = "embedkit_model_texts_embedded_total"
        _family(out, name, "counter", "Texts embedded, by served model.")
        for model, metrics in self.models.items():
            out.append(f"{name}{_labels({'model': model})} {metrics.texts_embedded}")


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))
