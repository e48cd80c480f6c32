"""The brokers' load reports: on the wire in BrokerHeartbeat, measured by the broker, kept by the active controller."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from broker.load_report import LoadReporter, file_system_usage
from controller.balancer.load_reports import LoadReports, planner_inputs
from protocol.codec import decode_struct, encode_struct
from protocol.messages.broker_lifecycle import BALANCER_LOAD_TAG
from protocol.primitives import write_uvarint
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from storage.log import LogConfig
from storage.manager import LogManager

API = APIS_BY_NAME["BrokerHeartbeat"]
HB = struct_classes(API.request)


def heartbeat(load=None):
    return HB.BrokerHeartbeatRequest(
        broker_id=2, broker_epoch=7, current_metadata_offset=40, want_fence=False, want_shut_down=False, balancer_load=load,
    )


def load(sizes=None, used=300):
    return HB.BalancerLoad(
        disk_capacity_bytes=1000, disk_used_bytes=used, bytes_in_per_second=5, bytes_out_per_second=-1,
        partition_sizes=sizes,
    )


def sized(*entries):
    by_topic = {}
    for topic, partition, size in entries:
        by_topic.setdefault(topic, []).append(HB.PartitionSize(partition_index=partition, size_bytes=size))
    return [HB.TopicSizes(topic=t, partitions=p) for t, p in by_topic.items()]


def test_the_report_round_trips_as_a_tagged_field_and_is_absent_when_not_sent():
    for version in (0, 1):
        with_sizes = heartbeat(load(sized(("a", 0, 123), ("a", 1, 0), ("b", 3, 2**40))))
        body = encode_struct(API.request, version, True, with_sizes)
        decoded, _ = decode_struct(API.request, version, True, body)
        assert decoded.balancer_load == with_sizes.balancer_load
        without_sizes = heartbeat(load(None))
        decoded, _ = decode_struct(API.request, version, True, encode_struct(API.request, version, True, without_sizes))
        assert decoded.balancer_load.partition_sizes is None and decoded.balancer_load.disk_used_bytes == 300
        # Not sent: no tag at all, the bytes of a heartbeat without the field, and it decodes as None.
        plain = encode_struct(API.request, version, True, heartbeat(None))
        assert plain[-1] == 0  # an empty tagged-field section
        assert decode_struct(API.request, version, True, plain)[0].balancer_load is None
    # A reader that does not know the tag skips it: the same bytes with an unknown tag decode the same.
    plain = encode_struct(API.request, 1, True, heartbeat(None))
    unknown = bytearray(plain[:-1])
    write_uvarint(unknown, 1)
    write_uvarint(unknown, BALANCER_LOAD_TAG + 1)
    write_uvarint(unknown, 2)
    unknown += b"\x00\x00"
    assert decode_struct(API.request, 1, True, bytes(unknown))[0].balancer_load is None


def test_the_controller_keeps_the_latest_report_and_the_last_sizes_sent():
    store = LoadReports()
    store.received(2, None, 100)
    assert store.get(2) is None  # nothing reported: nothing known
    store.received(2, load(None), 100)
    assert store.get(2).partition_sizes is None and store.get(2).sizes_received_ms == -1
    store.received(2, load(sized(("a", 0, 10), ("a", 1, 20))), 200)
    store.received(2, load(None, used=900), 300)  # a heartbeat between two size reports
    report = store.get(2)
    assert (report.disk_used_bytes, report.received_ms, report.sizes_received_ms) == (900, 300, 200)
    assert report.partition_sizes == {("a", 0): 10, ("a", 1): 20}
    assert report.above(80) and not report.above(90)
    store.received(3, load(sized(("a", 0, 15), ("b", 0, 5))), 300)
    disk, rates, sizes = planner_inputs(store.snapshot())
    assert disk == {2: (1000, 900), 3: (1000, 300)}
    assert rates == {2: (5, 0), 3: (5, 0)}  # unknown rates count as 0 for the planner
    assert sizes == {("a", 0): 15, ("a", 1): 20, ("b", 0): 5}  # the largest replica of each
    store.clear()  # a new active controller starts with none
    assert store.snapshot() == {}


def test_file_system_usage_counts_each_file_system_once(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    one = file_system_usage([a])
    assert one[0] > 0 and 0 <= one[1] <= one[0]
    both = file_system_usage([a, b, tmp_path / "missing"])
    stats = os.statvfs(a)
    assert both[0] == one[0] == stats.f_blocks * stats.f_frsize


def test_the_broker_sends_sizes_every_interval_and_measures_closed_logs_once(tmp_path):
    opened = SimpleNamespace(size_bytes=5)  # an open log's size is known in memory
    listed = []

    def size_bytes(topic, partition):  # a closed log's: listing its directory
        listed.append((topic, partition))
        return 77

    logs = SimpleNamespace(log_dirs=[tmp_path], logs={("t", 0): opened}, partitions=lambda: [("t", 0), ("t", 1)],
                           size_bytes=size_bytes)
    clock = [100.0]
    reporter = LoadReporter(SimpleNamespace(logs=logs, metrics=None), clock_s=lambda: clock[0], sizes_interval_ms=5000)
    first = reporter.report()
    assert first.disk_capacity_bytes > 0
    assert (first.bytes_in_per_second, first.bytes_out_per_second) == (-1, -1)  # no metrics: not measured
    assert [(t.topic, [(p.partition_index, p.size_bytes) for p in t.partitions]) for t in first.partition_sizes] == [
        ("t", [(0, 5), (1, 77)])
    ]
    clock[0] += 2
    assert reporter.report().partition_sizes is None  # within the interval: disk use only
    opened.size_bytes = 50
    clock[0] += 3
    again = reporter.report().partition_sizes
    assert [(p.partition_index, p.size_bytes) for p in again[0].partitions] == [(0, 50), (1, 77)]
    assert listed == [("t", 1)]  # the closed log was listed once


def test_sizes_are_measured_in_slices_of_the_event_loop_and_no_heartbeat_waits_for_them(tmp_path):
    import asyncio

    count = 100
    keys = [("many", p) for p in range(count)]

    def slow_size(topic, partition):  # a log not opened: its directory listed, slowly here
        time.sleep(0.002)
        return partition

    logs = SimpleNamespace(log_dirs=[tmp_path], logs={key: SimpleNamespace(size_bytes=key[1]) for key in keys[:50]},
                           partitions=lambda: keys, size_bytes=slow_size)
    clock = [100.0]
    reporter = LoadReporter(SimpleNamespace(logs=logs, metrics=None), clock_s=lambda: clock[0], sizes_interval_ms=5000)

    async def heartbeats():
        turns = [0]

        async def other_task() -> None:  # counts the event loop's turns while the sizes are measured
            while True:
                turns[0] += 1
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(other_task())
        reporter.prepare()
        first = reporter.report()  # at once, without the sizes (they are being measured)
        for _ in range(1000):
            if reporter._measuring is None:
                break
            await asyncio.sleep(0.01)
        reporter.prepare()  # measured already: nothing started
        assert reporter._measuring is None
        logs.logs[("many", 0)].size_bytes = 999  # after the measure: the heartbeat carries what was measured
        second = reporter.report()
        third = reporter.report()  # sent: not again within the interval
        task.cancel()
        return first, second, third, turns[0]

    first, second, third, turns = asyncio.run(heartbeats())
    assert first.partition_sizes is None and first.disk_capacity_bytes > 0
    assert [(p.partition_index, p.size_bytes) for p in second.partition_sizes[0].partitions] == [(p, p) for p in range(count)]
    assert third.partition_sizes is None
    assert turns >= 5  # the loop ran other work meanwhile (50 x 2 ms listed)

    async def within_the_interval():
        clock[0] += 1
        reporter.prepare()
        return reporter._measuring

    assert asyncio.run(within_the_interval()) is None  # not due: nothing measured


def test_the_sizes_of_a_real_log_manager(tmp_path):
    logs = LogManager([tmp_path])
    try:
        logs.get_or_create("t", 0, LogConfig())
        report = LoadReporter(SimpleNamespace(logs=logs, metrics=None)).report()
        assert [(t.topic, [p.partition_index for p in t.partitions]) for t in report.partition_sizes] == [("t", [0])]
    finally:
        logs.close()


def test_rates_come_from_the_client_byte_counters():
    counters = [1000, 50]
    metrics = SimpleNamespace(client_bytes=lambda: tuple(counters))
    broker = SimpleNamespace(logs=SimpleNamespace(log_dirs=[], logs={}, partitions=lambda: []), metrics=metrics)
    clock = [0.0]
    reporter = LoadReporter(broker, clock_s=lambda: clock[0])
    assert reporter.report().bytes_in_per_second == -1  # one reading is no rate
    clock[0] = 2.0
    counters[:] = [5000, 1050]
    report = reporter.report()
    assert (report.bytes_in_per_second, report.bytes_out_per_second) == (2000, 500)
