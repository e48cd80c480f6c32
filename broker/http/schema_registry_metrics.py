"""The schema registry's Prometheus families, on a broker serving its API with
``metrics.listener`` set (broker/http/metrics.py scrapes them):

- ``pybroker_schema_registry_schemas`` and ``_subjects``: schema ids and
  subjects with a version not deleted, as this broker's replay of ``_schemas``
  holds them. A broker catches up with the leader when its API is read, not
  when it is scraped (a scrape must not wait on another node), so the values
  may lag the leader until then; the HELP text says so.
- ``pybroker_schema_registry_requests_total{method,status}`` and
  ``pybroker_schema_registry_request_duration_seconds{method}`` (a histogram
  with the request metrics' buckets): what this broker's API answered, counted
  by broker/http/schema_registry.py's outermost middleware. A write forwarded
  to the leader is counted on both brokers.
"""

from __future__ import annotations

import bisect

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from broker.http.metrics import LATENCY_BUCKETS_S, _cumulative

# The methods the API serves: the others share the label "other", so the label set stays bounded.
SERVED_METHODS = frozenset({"GET", "POST", "PUT", "DELETE"})
LAG_NOTE = (
    "as replayed on this broker, which catches up with the _schemas leader when its registry API is read: "
    "it may lag the leader until then"
)


class SchemaRegistryMetrics:
    def __init__(self, service):
        self.service = service  # its ``state``: the RegistryState this broker replayed
        # (method, status) -> requests; method -> latency bucket counts (the last one
        # past the largest bound) and [sum of seconds].
        self.requests: dict[tuple[str, int], int] = {}
        self.latency_buckets: dict[str, list[int]] = {}
        self.latency_sum_s: dict[str, list[float]] = {}

    def request_done(self, method: str, status: int, elapsed_s: float) -> None:
        method = method if method in SERVED_METHODS else "other"
        key = (method, status)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.latency_buckets.get(method)
        if buckets is None:
            buckets = self.latency_buckets[method] = [0] * (len(LATENCY_BUCKETS_S) + 1)
            self.latency_sum_s[method] = [0.0]
        buckets[bisect.bisect_left(LATENCY_BUCKETS_S, elapsed_s)] += 1
        self.latency_sum_s[method][0] += elapsed_s

    def families(self):
        state = self.service.state
        schemas = sum(len(ids) for ids in state.context_ids.values())  # ids count per context
        yield GaugeMetricFamily("pybroker_schema_registry_schemas", f"Schema ids registered (all contexts), {LAG_NOTE}", value=schemas)
        yield GaugeMetricFamily(
            "pybroker_schema_registry_subjects", f"Subjects with a version not deleted, {LAG_NOTE}", value=len(state.subject_names())
        )
        requests = CounterMetricFamily(
            "pybroker_schema_registry_requests",
            "Requests this broker's schema registry API answered, per method and HTTP status "
            "(a write forwarded to the _schemas leader counts on both brokers)",
            labels=["method", "status"],
        )
        for (method, status), count in sorted(self.requests.items()):
            requests.add_metric([method, str(status)], count)
        yield requests
        latency = HistogramMetricFamily(
            "pybroker_schema_registry_request_duration_seconds",
            "Time from a schema registry request's arrival to its answer being ready, per method "
            "(a forwarded write includes the leader's answer)",
            labels=["method"],
        )
        for method, buckets in sorted(self.latency_buckets.items()):
            latency.add_metric([method], _cumulative(LATENCY_BUCKETS_S, buckets), self.latency_sum_s[method][0])
        yield latency
