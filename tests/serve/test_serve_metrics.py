"""The /metrics text, read back with prometheus_client's own parser."""

from __future__ import annotations

import pytest

from embedkit.serve.dynamic_batcher import BatchStats
from embedkit.serve.metrics import Metrics

parser = pytest.importorskip("prometheus_client.parser")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    families = list(parser.text_string_to_metric_families(text))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_counters_histograms_and_gauges_parse_to_the_values_observed():
    metrics = Metrics()
    for seconds in (0.003, 0.02, 0.02, 4.0):
        metrics.observe_request("/v1/embeddings", 200, seconds)
    metrics.observe_request("/v1/embeddings", 422, 0.001)
    metrics.observe_request('odd"route\\', 404, 0.001)  # label values are escaped
    for texts in (1, 3, 64, 5000):
        metrics.observe_batch(BatchStats(texts=texts, tokens=10, waited_s=0.0, run_s=0.01))
    metrics.count_texts(texts=7, tokens=70, truncated=2)
    metrics.gauge("embedkit_queue_depth", "Texts waiting.", lambda: 12)

    values = samples(metrics.render())
    route = (("route", "/v1/embeddings"),)
    assert values[("embedkit_requests_total", (*route, ("status", "200")))] == 4
    assert values[("embedkit_requests_total", (*route, ("status", "422")))] == 1
    assert values[("embedkit_requests_total", (("route", 'odd"route\\'), ("status", "404")))] == 1
    # cumulative buckets, by hand: 0.003 <= 0.005; two 0.02 <= 0.025; 4.0 <= 5; 0.001 (422) <= 0.005
    for bound, count in (("0.005", 2), ("0.01", 2), ("0.025", 4), ("2.5", 4), ("5.0", 5), ("+Inf", 5)):
        key = ("embedkit_request_duration_seconds_bucket", (("le", bound), *route))
        assert values[key] == count, bound
    assert values[("embedkit_request_duration_seconds_count", route)] == 5
    assert values[("embedkit_request_duration_seconds_sum", route)] == pytest.approx(4.044)
    assert values[("embedkit_batch_size_bucket", (("le", "1.0"),))] == 1
    assert values[("embedkit_batch_size_bucket", (("le", "4.0"),))] == 2
    assert values[("embedkit_batch_size_bucket", (("le", "64.0"),))] == 3
    assert values[("embedkit_batch_size_bucket", (("le", "2048.0"),))] == 3
    assert values[("embedkit_batch_size_bucket", (("le", "+Inf"),))] == 4
    assert values[("embedkit_batch_size_sum", ())] == 5068
    assert values[("embedkit_texts_embedded_total", ())] == 7
    assert values[("embedkit_prompt_tokens_total", ())] == 70
    assert values[("embedkit_truncated_texts_total", ())] == 2
    assert values[("embedkit_queue_depth", ())] == 12
