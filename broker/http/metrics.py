"""Prometheus metrics: ``metrics.listener=http://HOST:PORT`` serves ``GET /metrics``.

Names follow what Prometheus' JMX exporter makes of Kafka's MBeans (lower-cased
``kafka_<domain>_<type>_<name>``, ``_total`` for the ``...PerSec`` meters, the
beans' keys as labels), so that dashboards and alerts written for Kafka read a
pybroker cluster unchanged (Kafka's own metrics, such as the group coordinator's
``kafka.server:type=group-coordinator-metrics`` group counts per type and
state, as ``kafka_server_<type>_<name>``). Where Kafka has no bean (group lag,
the event loop) the names are kafka_exporter's or pybroker's own.

The hot path only bumps plain ints: per produced batch and per fetched
partition (the Produce and Fetch handlers are wrapped, not edited), and per
request in the dispatcher (count and latency per API). Everything else is read
from the broker's state when Prometheus scrapes, by :class:`_BrokerCollector`,
on the event loop (the endpoint is an aiohttp application, broker/http/server.py),
in slices of ``SERIES_PER_TURN`` partitions; the families are then formatted on
a worker thread (broker/http/exposition.py says why and what that relies on).

The balancer's families (broker/http/balancer_metrics.py) have series on the
active controller only.

Longer than ~700 lines on purpose: one collector builds every family, and all
of them share its topic cap and its rule of reading state only at scrape time;
the balancer's and the schema registry's families, the HTTP server and the
scrape's slicing (broker/http/exposition.py) are apart already.

Cardinality is bounded: ``metrics.topic.series.max`` topics get per-topic and
per-partition series (the first ones by name, so the set is stable across
scrapes), ``metrics.group.series.max`` consumer-group lag series; what is left
out is counted in ``pybroker_metrics_series_dropped``.

Consumer-group lag is per broker, as Kafka's broker-side metrics are: each
broker reports the groups it coordinates. A committed partition whose log is
not on this broker gets its high watermark from a cache
(broker.http.cluster_reader.HighWatermarkCache) that a background task refreshes
every ``REMOTE_HW_REFRESH_MS`` with one ListOffsets per leader; the scrape
only reads that cache, so it sends nothing and never waits on another node.
Such a high watermark is up to one refresh interval old; a partition whose
leader did not answer the last refresh has no series (lag nor committed offset)
until it does, as before its first refresh.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from dataclasses import replace

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder

from broker.config import MetricsListener
from broker.http.balancer_metrics import balancer_families
from broker.http.cluster_reader import ClusterReader, HighWatermarkCache
from broker.http.exposition import NEXT_TURN, SERIES_PER_TURN, gather_now, scrape
from broker.http.server import MAX_HTTP_CONNECTIONS, HttpServer, application  # noqa: F401 (re-exported: this endpoint's limit)
from broker.loop_monitor import LAG_BUCKET_BOUNDS_MS, RECENT_WINDOW_S
from broker.net.dispatch import AnswerLater
from controller.metadata.records import MIRROR_STATE_NAMES
from protocol.records import RECORDS_COUNT_OFFSET, RECORDS_OFFSET
from protocol.registry import APIS_BY_KEY, APIS_BY_NAME

log = logging.getLogger(__name__)

# Kafka's group states per type, each reported even at 0 (as Kafka registers every gauge).
CLASSIC_GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")

PRODUCE_KEY = APIS_BY_NAME["Produce"].key
FETCH_KEY = APIS_BY_NAME["Fetch"].key

# Upper bounds (seconds) of the request latency histograms: a Produce answered
# from memory takes well under a millisecond, a long-polling Fetch waits up to
# its max_wait_ms (500 ms by default), an acks=all Produce up to its timeout.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# The per-topic counters, one list per topic (a list of ints: the cheapest thing
# to bump on the hot path). Index -> the BrokerTopicMetrics meter it feeds.
BYTES_IN, MESSAGES_IN, BYTES_OUT, PRODUCE_REQUESTS, FETCH_REQUESTS, FAILED_PRODUCE, FAILED_FETCH = range(7)
TOPIC_COUNTER_FAMILIES = (
    ("kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers (record batches as received)"),
    ("kafka_server_brokertopicmetrics_messagesin", "Records appended by producers"),
    ("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to consumers (followers not included)"),
    ("kafka_server_brokertopicmetrics_totalproducerequests", "Produce partitions handled"),
    ("kafka_server_brokertopicmetrics_totalfetchrequests", "Fetch partitions answered to consumers"),
    ("kafka_server_brokertopicmetrics_failedproducerequests", "Produce partitions answered with an error"),
    ("kafka_server_brokertopicmetrics_failedfetchrequests", "Fetch partitions answered to consumers with an error"),
)

DEFAULT_TOPIC_SERIES_MAX = 1000
DEFAULT_GROUP_SERIES_MAX = 10000
# How often the high watermarks of committed partitions led elsewhere are refreshed (see above).
REMOTE_HW_REFRESH_MS = 5000


# --------------------------------------------------------------------------- the counters


class BrokerMetrics:
    """The counters the broker bumps, the collector that reads the rest at
    scrape time, and the HTTP endpoint serving them."""

    def __init__(self, broker, listener: MetricsListener, *, topic_series_max: int, group_series_max: int):
        self.broker = broker
        self.listener = listener
        self.topic_series_max = topic_series_max
        self.group_series_max = group_series_max
        # topic -> counters (see BYTES_IN...). Only topics of the metadata image get
        # an entry (a client may name any topic), and deleted ones go at scrape time.
        self.topics: dict[str, list[int]] = {}
        self.all_topics = [0] * len(TOPIC_COUNTER_FAMILIES)
        self.replication_bytes_out = 0
        # (api key, version) -> requests; api key -> latency bucket counts (the
        # last one past the largest bound) and [sum of seconds].
        self.requests: dict[tuple[int, int], int] = {}
        self.latency_buckets: dict[int, list[int]] = {}
        self.latency_sum_s: dict[int, list[float]] = {}
        # The schema registry's counters and state (broker/http/schema_registry_metrics.py),
        # set by its API when this broker serves one; None: no registry families.
        self.schema_registry = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_BrokerCollector(self))
        # CPU, memory and open files of this process (Linux /proc), as every Prometheus client offers.
        ProcessCollector(namespace="", registry=self.registry)
        # One request per connection (``Connection: close``): Prometheus opens one per scrape anyway.
        app = application(one_request_per_connection=True)
        app.router.add_route("*", "/{path:.*}", self._scrape)
        self.http = HttpServer(app, listener)
        self.bound_port: int | None = None
        # High watermarks of committed partitions led elsewhere, refreshed while the endpoint serves.
        self.remote_hws: HighWatermarkCache | None = None
        self._scraping = asyncio.Lock()

    def _remote_lag_partitions(self) -> set[tuple[str, int]]:
        """Committed partitions of the groups this broker coordinates whose log is not
        here (at most ``group_series_max``, the ones the scrape would report first)."""
        broker = self.broker
        if not broker.is_broker:
            return set()
        offsets = broker.groups.coordinator.offsets
        logs = broker.logs.logs
        wanted: set[tuple[str, int]] = set()
        considered = 0
        for group_id in sorted(offsets):
            for key in sorted(offsets[group_id]):
                if considered >= self.group_series_max:
                    return wanted
                considered += 1
                if key not in logs:
                    wanted.add(key)
        return wanted

    @classmethod
    def from_config(cls, broker) -> BrokerMetrics | None:
        config = broker.config
        listener = config["metrics.listener"]
        if listener is None:
            return None
        return cls(
            broker,
            listener,
            topic_series_max=config["metrics.topic.series.max"],
            group_series_max=config["metrics.group.series.max"],
        )

    # ------------------------------------------------------------- hot path

    def request_done(self, api_key: int, api_version: int, elapsed_s: float) -> None:
        """One request answered (called by the dispatcher for supported APIs only,
        so the keys stay within the handler table)."""
        key = (api_key, api_version)
        self.requests[key] = self.requests.get(key, 0) + 1
        buckets = self.latency_buckets.get(api_key)
        if buckets is None:
            buckets = self.latency_buckets[api_key] = [0] * (len(LATENCY_BUCKETS_S) + 1)
            self.latency_sum_s[api_key] = [0.0]
        buckets[bisect.bisect_left(LATENCY_BUCKETS_S, elapsed_s)] += 1
        self.latency_sum_s[api_key][0] += elapsed_s

    def _topic(self, name: str) -> list[int] | None:
        counters = self.topics.get(name)
        if counters is None and name in self.broker.image.topics:
            counters = self.topics[name] = [0] * len(TOPIC_COUNTER_FAMILIES)
        return counters

    def produced(self, request, response) -> None:
        """Count a Produce: per partition one request, and its batch's bytes and
        records when appended, or a failure. ``response`` None: acks=0, whose
        outcome nobody hears of; its partitions are counted as appended."""
        errors = _produce_errors(response)
        totals = self.all_topics
        for topic_data in request.topic_data:
            name = topic_data.name
            counters = self._topic(name)
            for pdata in topic_data.partition_data:
                error = errors.get((name, pdata.index), 0) if errors is not None else 0
                records = pdata.records
                size = len(records) if records is not None else 0
                # One batch per partition (Produce v3+ refuses more); its header has the record count.
                count = int.from_bytes(records[RECORDS_COUNT_OFFSET:RECORDS_OFFSET], "big") if size >= RECORDS_OFFSET else 0
                totals[PRODUCE_REQUESTS] += 1
                if error:
                    totals[FAILED_PRODUCE] += 1
                else:
                    totals[BYTES_IN] += size
                    totals[MESSAGES_IN] += count
                if counters is not None:
                    counters[PRODUCE_REQUESTS] += 1
                    if error:
                        counters[FAILED_PRODUCE] += 1
                    else:
                        counters[BYTES_IN] += size
                        counters[MESSAGES_IN] += count

    def fetched(self, from_follower: bool, response) -> None:
        """Count a Fetch answer: per partition one request, its record bytes, or a failure."""
        if response is None or response.error_code:
            return
        if from_follower:
            # Kafka keeps replication traffic out of BytesOut (ReplicationBytesOutPerSec).
            self.replication_bytes_out += sum(
                len(pd.records) for t in response.responses for pd in t.partitions if pd.records is not None
            )
            return
        names = self.broker.image.topic_names_by_id
        totals = self.all_topics
        for topic_response in response.responses:
            name = topic_response.topic or names.get(topic_response.topic_id)
            counters = self._topic(name) if name else None
            for pd in topic_response.partitions:
                size = len(pd.records) if pd.records is not None else 0
                totals[FETCH_REQUESTS] += 1
                totals[BYTES_OUT] += size
                if pd.error_code:
                    totals[FAILED_FETCH] += 1
                if counters is not None:
                    counters[FETCH_REQUESTS] += 1
                    counters[BYTES_OUT] += size
                    if pd.error_code:
                        counters[FAILED_FETCH] += 1

    # ------------------------------------------------------------- wiring

    def client_bytes(self) -> tuple[int, int]:
        """(bytes produced, bytes fetched by consumers) so far: Kafka's BytesIn and
        BytesOut counters (broker/load_report.py turns them into rates)."""
        return self.all_topics[BYTES_IN], self.all_topics[BYTES_OUT]

    def instrument(self, *dispatchers) -> None:
        """Time and count every request of these dispatchers, and wrap the Produce
        and Fetch handlers (when registered) to count bytes and records per topic."""
        for dispatcher in dispatchers:
            dispatcher.enable_metrics(self)
            produce = dispatcher.handlers.get(PRODUCE_KEY)
            if produce is not None and not produce.is_async:
                dispatcher.handlers[PRODUCE_KEY] = replace(produce, handle=self._counting_produce(produce.handle))
            fetch = dispatcher.handlers.get(FETCH_KEY)
            if fetch is not None and fetch.is_async:
                dispatcher.handlers[FETCH_KEY] = replace(fetch, handle=self._counting_fetch(fetch.handle))

    def _counting_produce(self, handle):
        produced = self.produced

        def produce(ctx, request):
            answer = handle(ctx, request)
            if type(answer) is AnswerLater:
                return AnswerLater(_then_count_produce(answer.answer, produced, request), overlappable=answer.overlappable)
            produced(request, answer)
            return answer

        return produce

    def _counting_fetch(self, handle):
        fetched = self.fetched

        async def fetch(ctx, request):
            response = await handle(ctx, request)
            # The Fetch handler marks a follower's fetch exempt from client quotas.
            fetched(ctx.throttle_exempt, response)
            return response

        return fetch

    # ------------------------------------------------------------- HTTP

    async def start(self) -> None:
        """Bind and serve the endpoint; an OSError (port in use...) is the caller's to report."""
        listener = self.listener
        self.bound_port = await self.http.start()
        self.remote_hws = HighWatermarkCache(
            ClusterReader(self.broker, f"pybroker-metrics-{self.broker.node_id}"), self._remote_lag_partitions, REMOTE_HW_REFRESH_MS
        )
        self.remote_hws.start()
        shown = MetricsListener(listener.host, self.bound_port)
        log.info("metrics: serving Prometheus metrics on %s/metrics", shown)

    async def stop(self) -> None:
        await self.http.stop()
        if self.remote_hws is not None:
            await self.remote_hws.stop()
            self.remote_hws = None

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The body and content type of a scrape: Prometheus' text format, or
        OpenMetrics when the client asks for it (prometheus-client's choice)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(gather_now(self.registry.collect())), content_type

    async def exposition_off_loop(self, accept: str | None) -> tuple[bytes, str]:
        """:meth:`exposition`, gathered in slices and formatted on a thread."""
        encoder, content_type = choose_encoder(accept)
        async with self._scraping:  # one scrape's families in memory at a time
            return await scrape(self.registry.collect(), encoder), content_type

    async def _scrape(self, request: web.Request) -> web.Response:
        """Every path and method comes here, so that the answers are this endpoint's own."""
        if request.rel_url.raw_path != "/metrics":
            return _plain(404, b"not found: the metrics are at /metrics\n")
        if request.method not in ("GET", "HEAD"):
            return _plain(405, b"method not allowed\n", Allow="GET, HEAD")
        try:
            body, content_type = await self.exposition_off_loop(request.headers.get("Accept"))
        except Exception:  # a collector bug must not take the listener down
            log.exception("metrics: scrape failed")
            return _plain(500, b"internal error\n")
        return web.Response(status=200, body=body, headers={"Content-Type": content_type})


def _plain(status: int, body: bytes, **headers) -> web.Response:
    return web.Response(status=status, body=body, headers={"Content-Type": "text/plain; charset=utf-8", **headers})


async def _then_count_produce(answer, produced, request):
    response = await answer
    produced(request, response)
    return response


def _produce_errors(response) -> dict[tuple[str, int], int] | None:
    if response is None:
        return None
    return {
        (topic.name, partition.index): partition.error_code
        for topic in response.responses
        for partition in topic.partition_responses
        if partition.error_code
    }


# --------------------------------------------------------------------------- scrape time


class _BrokerCollector:
    """Builds every family from the counters and the broker's state at scrape time."""

    def __init__(self, metrics: BrokerMetrics):
        self.metrics = metrics

    def collect(self):
        metrics = self.metrics
        broker = metrics.broker
        image = broker.image
        # The topics that get series: the first ones by name (stable across scrapes).
        names = sorted(image.topics)
        kept = set(names[: metrics.topic_series_max])
        dropped_topics = len(names) - len(kept)
        # Counters of deleted topics go: their series end, as the topic's beans do in Kafka.
        for name in [n for n in metrics.topics if n not in image.topics]:
            del metrics.topics[name]
        yield from self._topic_counters(kept)
        yield from self._requests()
        yield from self._replicas(kept)
        yield from self._controller()
        yield from balancer_families(metrics.broker)
        yield from self._logs(kept)
        yield from self._mirrors(kept)
        yield from self._multi_master(kept)
        yield self._schema_validation(kept)
        lag, dropped_lag = self._group_lag()
        yield from lag
        yield from self._group_counts()
        yield from self._connections()
        yield from self._loop_lag()
        if metrics.schema_registry is not None:
            yield from metrics.schema_registry.families()
        dropped = GaugeMetricFamily(
            "pybroker_metrics_series_dropped",
            "Left out by metrics.topic.series.max (topics) and metrics.group.series.max (group lag series)",
            labels=["family"],
        )
        dropped.add_metric(["topic"], dropped_topics)
        dropped.add_metric(["group_lag"], dropped_lag)
        yield dropped

    def _topic_counters(self, kept: set[str]):
        metrics = self.metrics
        for index, (name, documentation) in enumerate(TOPIC_COUNTER_FAMILIES):
            family = CounterMetricFamily(name, documentation, labels=["topic"])
            family.add_metric([], metrics.all_topics[index])  # the all-topics series, as Kafka's bean without topic=
            for topic in sorted(kept.intersection(metrics.topics)):
                family.add_metric([topic], metrics.topics[topic][index])
            yield family
        replication = CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesout", "Record bytes sent to follower replicas"
        )
        replication.add_metric([], metrics.replication_bytes_out)
        yield replication

    def _requests(self):
        metrics = self.metrics
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests answered, per API and version", labels=["request", "version"]
        )
        for (api_key, version), count in sorted(metrics.requests.items()):
            requests.add_metric([_api_name(api_key), str(version)], count)
        yield requests
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from a request's decoding to its response being ready (excludes queueing behind earlier "
            "requests of the connection and the send)",
            labels=["request"],
        )
        for api_key, buckets in sorted(metrics.latency_buckets.items()):
            latency.add_metric([_api_name(api_key)], _cumulative(LATENCY_BUCKETS_S, buckets), metrics.latency_sum_s[api_key][0])
        yield latency

    def _replicas(self, kept: set[str]):
        broker = self.metrics.broker
        replicas = broker.replicas
        # From the metadata: a partition whose log is not opened yet (after a
        # restart, until first used) is hosted and led all the same.
        hosted = replicas.hosted()
        for name, documentation, value in (
            ("underreplicatedpartitions", "Partitions this broker leads whose ISR lacks some replicas", hosted.under_replicated),
            ("underminisrpartitioncount", "Partitions this broker leads whose ISR is below min.insync.replicas", hosted.under_min_isr),
            ("partitioncount", "Partitions this broker has a replica of", hosted.count),
            ("leadercount", "Partitions this broker leads", hosted.leaders),
        ):
            yield _gauge(f"kafka_server_replicamanager_{name}", documentation, value)
        # Kafka's kafka.log:type=LogManager gauges: OfflineLogDirectoryCount, and
        # LogDirectoryOffline per dir (1 offline, 0 online).
        logs = broker.logs
        yield _gauge(
            "kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline after a failed write, until a restart", len(logs.offline_dirs)
        )
        offline = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectoryoffline", "1 when the log dir is offline after a failed write, else 0", labels=["logdirectory"]
        )
        for directory in logs.log_dirs:
            offline.add_metric([str(directory)], int(directory in logs.offline_dirs))
        yield offline
        yield _gauge(
            "pybroker_log_open_partitions",
            "Partition logs open on this broker; the other hosted ones are opened on first use",
            broker.logs.open_count,
        )
        for name, documentation, value in (
            ("isrshrinks", "ISR shrinks of partitions this broker leads, as committed by the controller", replicas.isr_shrinks),
            ("isrexpands", "ISR expansions of partitions this broker leads, as committed by the controller", replicas.isr_expands),
        ):
            counter = CounterMetricFamily(f"kafka_server_replicamanager_{name}", documentation)
            counter.add_metric([], value)
            yield counter

    def _controller(self):
        broker = self.metrics.broker
        image = broker.image
        raft = broker.raft
        active = broker.is_controller and raft.is_leader
        # As in Kafka, the cluster-wide counts come from the active controller only (0 elsewhere).
        offline = topics = partitions = 0
        if active:
            topics = len(image.topics)
            for topic in image.topics.values():
                partitions += len(topic.partitions)
                offline += sum(1 for p in topic.partitions.values() if p.leader < 0)
        for name, documentation, value in (
            ("activecontrollercount", "1 on the active controller (the metadata quorum's leader)", int(active)),
            ("offlinepartitionscount", "Partitions without a leader", offline),
            ("globaltopiccount", "Topics in the cluster", topics),
            ("globalpartitioncount", "Partitions in the cluster", partitions),
        ):
            yield _gauge(f"kafka_controller_kafkacontroller_{name}", documentation, value)
        node = raft.node
        yield _gauge("kafka_server_raft_metrics_current_epoch", "The metadata quorum's epoch", node.epoch if node else 0)
        yield _gauge("kafka_server_raft_metrics_high_watermark", "The metadata log's committed end", raft.high_watermark)
        yield _gauge("kafka_server_raft_metrics_log_end_offset", "The metadata log's end offset on this node", broker.raft_log.end_offset)
        yield _gauge(
            "kafka_server_broker_metadata_metrics_last_applied_record_offset",
            "The last metadata log offset this node's metadata image includes",
            image.offset,
        )

    def _logs(self, kept: set[str]):
        families = {
            "size": GaugeMetricFamily("kafka_log_log_size", "Bytes in the partition's segment files", labels=["topic", "partition"]),
            "logendoffset": GaugeMetricFamily("kafka_log_log_logendoffset", "The offset the next record gets", labels=["topic", "partition"]),
            "logstartoffset": GaugeMetricFamily("kafka_log_log_logstartoffset", "The first offset still held", labels=["topic", "partition"]),
            "numlogsegments": GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of the partition", labels=["topic", "partition"]),
        }
        # Opened logs only: a scrape must not open files (replicated partitions are
        # opened when they take their role; this leaves out single-replica logs
        # nobody used since the start).
        for index, ((topic, partition), plog) in enumerate(sorted(self.metrics.broker.logs.opened_logs())):
            if index % SERIES_PER_TURN == SERIES_PER_TURN - 1:
                yield NEXT_TURN  # the sorted list is this generator's own: safe across the turn
            if topic not in kept:
                continue
            labels = [topic, str(partition)]
            segments = plog.segments
            families["size"].add_metric(labels, sum(s.size_bytes for s in segments))
            families["logendoffset"].add_metric(labels, plog.log_end_offset)
            families["logstartoffset"].add_metric(labels, plog.log_start_offset)
            families["numlogsegments"].add_metric(labels, len(segments))
        yield from families.values()

    def _mirrors(self, kept: set[str]):
        """Cluster links: per mirror partition this broker leads and copies, its
        lag behind the source (records, ms), the last answer's time and the
        mirror's state (a number: controller/metadata/records.py MIRROR_*, with
        its name as a label)."""
        labels = ["link", "topic", "partition"]
        lag_records = GaugeMetricFamily(
            "pybroker_mirror_partition_lag_records", "Records the source's high watermark is ahead of this mirror partition's log end", labels=labels
        )
        lag_ms = GaugeMetricFamily(
            "pybroker_mirror_partition_lag_ms", "Milliseconds since this mirror partition last held everything the source had committed", labels=labels
        )
        last_fetch = GaugeMetricFamily(
            "pybroker_mirror_partition_last_fetch_timestamp_ms", "Wall-clock time of the source's last answer (-1: none yet)", labels=labels
        )
        state = GaugeMetricFamily(
            "pybroker_mirror_partition_state", "The mirror's state (0 ACTIVE, 2 PENDING_PROMOTE, 3 PENDING_FAILOVER)", labels=labels + ["state"]
        )
        errors = GaugeMetricFamily(
            "pybroker_mirror_partition_error", "1 while the source's last answer was an error or copying stopped on one", labels=labels
        )
        now_ms = int(time.time() * 1000)
        broker = self.metrics.broker
        for link, topic, partition, mirror_state, core, plog in sorted(broker.mirrors.partition_rows(), key=lambda row: row[:3]):
            if topic not in kept:
                continue
            series = [link, topic, str(partition)]
            lag_records.add_metric(series, core.lag_records(plog.log_end_offset))
            lag_ms.add_metric(series, core.lag_ms(plog.log_end_offset, now_ms))
            last_fetch.add_metric(series, core.last_fetch_ms)
            state.add_metric(series + [MIRROR_STATE_NAMES.get(mirror_state, str(mirror_state))], mirror_state)
            errors.add_metric(series, 1 if core.failure or core.error != 0 else 0)
        return [lag_records, lag_ms, last_fetch, state, errors]

    def _multi_master(self, kept: set[str]):
        """Cluster links: per multi-master partition this broker leads and copies
        in from a link's source, the batches fetched by what became of them
        (copied, already here, or skipped with the reason), the source position
        and whether the copy has a problem or stopped."""
        labels = ["link", "topic", "partition"]
        batches = CounterMetricFamily(
            "pybroker_multi_master_batches", "Source batches fetched by the multi-master copy, by outcome", labels=labels + ["outcome"]
        )
        position = GaugeMetricFamily(
            "pybroker_multi_master_source_position", "The next source offset the multi-master copy reads", labels=labels
        )
        errors = GaugeMetricFamily(
            "pybroker_multi_master_partition_error", "1 while the copy's last round failed or the copy stopped on a sequence gap", labels=labels
        )
        for (link, topic, partition), copy in sorted(self.metrics.broker.multi_master.partitions.items()):
            if topic not in kept:
                continue
            series = [link, topic, str(partition)]
            batches.add_metric(series + ["copied"], copy.copied_batches)
            for outcome, count in sorted(copy.skipped_batches.items()):
                batches.add_metric(series + [outcome], count)
            position.add_metric(series, copy.position)
            errors.add_metric(series, 1 if copy.error or copy.problem else 0)
        translations = self.metrics.broker.offset_sync.translator.results()
        labels = ["link", "group", "topic", "partition"]
        group_offset = GaugeMetricFamily(
            "pybroker_multi_master_group_offset",
            "Where a source group resumes in this cluster: its translated offset of a multi-master partition",
            labels=labels,
        )
        again = GaugeMetricFamily(
            "pybroker_multi_master_group_again_records",
            "Records the group consumed at the source that lie after its translated offset here (delivered again); "
            "a lower bound while pybroker_multi_master_group_again_counted is 0",
            labels=labels,
        )
        counted = GaugeMetricFamily(
            "pybroker_multi_master_group_again_counted", "1 when the records delivered again were counted to the high watermark", labels=labels
        )
        image = self.metrics.broker.image
        for (link_id, group, topic, partition), place in sorted(translations.items(), key=lambda item: item[0][1:]):
            link = image.link_by_id(link_id)
            if topic not in kept or link is None:
                continue
            series = [link.name, group, topic, str(partition)]
            group_offset.add_metric(series, place.offset)
            again.add_metric(series, place.again_records)
            counted.add_metric(series, 1 if place.again_counted else 0)
        return [batches, position, errors, group_offset, again, counted]

    def _schema_validation(self, kept: set[str]):
        """Records refused by schema validation on produce, per topic and side
        (broker/schemas/validation.py), on the partitions this broker leads."""
        refused = CounterMetricFamily(
            "pybroker_schema_validation_refused_records",
            "Records refused by schema validation on produce (INVALID_RECORD), by topic and side (key or value)",
            labels=["topic", "side"],
        )
        for (topic, side), count in sorted(self.metrics.broker.schema_validator.refused_records.items()):
            if topic in kept:
                refused.add_metric([topic, side], count)
        return refused

    def _group_lag(self):
        """Lag of the groups this broker coordinates, per committed partition: the high
        watermark (what a consumer can read; of a partition whose log is not here, the
        background-refreshed cache's) less the committed offset."""
        metrics = self.metrics
        broker = metrics.broker
        labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "Records between a group's committed offset and the high watermark", labels=labels)
        committed = GaugeMetricFamily("kafka_consumergroup_current_offset", "A group's committed offset", labels=labels)
        emitted = dropped = 0
        limit = metrics.group_series_max
        offsets = broker.groups.coordinator.offsets if broker.is_broker else {}
        remote_hws = metrics.remote_hws.values if metrics.remote_hws is not None else {}
        for group_id in sorted(offsets):
            for (topic, partition), offset in sorted(offsets[group_id].items()):
                plog = broker.logs.logs.get((topic, partition))
                hw = plog.high_watermark if plog is not None else remote_hws.get((topic, partition))
                if hw is None:
                    continue  # led elsewhere and not (yet) in the cache: its end is not known here
                if emitted >= limit:
                    dropped += 1
                    continue
                emitted += 1
                series = [group_id, topic, str(partition)]
                committed.add_metric(series, offset.offset)
                lag.add_metric(series, max(hw - offset.offset, 0))
        return [lag, committed], dropped

    def _group_counts(self):
        """The groups this broker coordinates by type and state, as Kafka 4's
        ``kafka.server:type=group-coordinator-metrics`` (group-count per protocol,
        classic-group-count and consumer-group-count per state, offset-count) and the
        ``kafka.coordinator.group:type=GroupMetadataManager`` gauges it keeps for classic
        groups. A group known by its committed offsets only is an Empty classic group,
        as Kafka makes one when such offsets are committed."""
        broker = self.metrics.broker
        classic = dict.fromkeys(CLASSIC_GROUP_STATES, 0)
        consumer = dict.fromkeys(CONSUMER_GROUP_STATES, 0)
        offsets = 0
        if broker.is_broker:
            coordinator, consumer_groups = broker.groups.coordinator, broker.groups.consumer_groups.groups
            for group in consumer_groups.values():
                consumer[group.state] = consumer.get(group.state, 0) + 1
            for group_id in set(coordinator.groups) | set(coordinator.offsets):
                group = coordinator.groups.get(group_id)
                if group is not None or group_id not in consumer_groups:
                    state = group.state.value if group is not None else "Empty"
                    classic[state] = classic.get(state, 0) + 1
            offsets = sum(len(committed) for committed in coordinator.offsets.values())
        prefix = "kafka_server_group_coordinator_metrics_"
        by_protocol = GaugeMetricFamily(
            prefix + "group_count", "Groups this broker coordinates, per protocol", labels=["protocol"]
        )
        by_protocol.add_metric(["classic"], sum(classic.values()))
        by_protocol.add_metric(["consumer"], sum(consumer.values()))
        yield by_protocol
        for kind, counts in (("classic", classic), ("consumer", consumer)):
            family = GaugeMetricFamily(
                prefix + f"{kind}_group_count", f"{kind.capitalize()} groups this broker coordinates, per state",
                labels=["state"],
            )
            for state, count in counts.items():
                family.add_metric([state], count)
            yield family
        yield _gauge(prefix + "offset_count", "Committed offsets this broker's groups hold", offsets)
        legacy = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(legacy + "numgroups", "Classic groups this broker coordinates", sum(classic.values()))
        for state in CLASSIC_GROUP_STATES:
            yield _gauge(
                legacy + "numgroups" + state.lower(), f"Classic groups this broker coordinates in state {state}", classic[state]
            )
        yield _gauge(legacy + "numoffsets", "Committed offsets this broker's groups hold", offsets)

    def _connections(self):
        broker = self.metrics.broker
        counts = {listener.name: 0 for listener in broker.config.listeners}
        for connection in list(broker._connections):
            name = connection.listener_name or "unknown"
            counts[name] = counts.get(name, 0) + 1
        family = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count", "Open client and node connections", labels=["listener"]
        )
        for name, count in sorted(counts.items()):
            family.add_metric([name], count)
        yield family

    def _loop_lag(self):
        monitor = self.metrics.broker.loop_monitor
        histogram = monitor.histogram
        family = HistogramMetricFamily(
            "pybroker_event_loop_lag_seconds",
            "How much later than asked the event loop ran a timer: what every request waited on top of its own work",
        )
        bounds_s = tuple(bound / 1000 for bound in LAG_BUCKET_BOUNDS_MS)
        family.add_metric([], _cumulative(bounds_s, histogram.counts), histogram.sum_ms / 1000)
        # The maxima, which the buckets only bound: the figure the no-stall-over-50-ms goal is about.
        return [
            family,
            _gauge("pybroker_event_loop_lag_max_seconds", "The event loop's largest lag since the broker started", monitor.max_lag_ms / 1000),
            _gauge(
                "pybroker_event_loop_lag_cpu_max_seconds",
                "The largest part of an event loop lag its thread spent on the CPU since the broker started (at least)",
                monitor.max_cpu_lag_ms / 1000,
            ),
            _gauge(
                "pybroker_event_loop_lag_recent_max_seconds",
                f"The event loop's largest lag over the last {RECENT_WINDOW_S} s",
                monitor.recent_max_lag_ms() / 1000,
            ),
        ]


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, int]]:
    """Per-bucket counts (the last one past the largest bound) -> Prometheus' cumulative buckets."""
    buckets = []
    seen = 0
    for bound, count in zip(bounds, counts):
        seen += count
        buckets.append((repr(float(bound)), seen))
    buckets.append(("+Inf", seen + counts[-1]))
    return buckets


def _gauge(name: str, documentation: str, value) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _api_name(api_key: int) -> str:
    api = APIS_BY_KEY.get(api_key)
    return api.name if api is not None else str(api_key)
