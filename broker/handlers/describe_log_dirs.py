"""DescribeLogDirs (key 35), versions 0-4.

One result per entry of ``log.dirs``, named by its absolute path, listing the
partitions whose logs live there: ``topics`` null asks for every partition
this broker hosts, otherwise only the named (topic, partition) pairs, those
this broker does not host being left out (as are topics left with none). A
partition's size is the bytes of its segment files (read from the open log,
or by stat for a log not opened yet, which stays closed); ``offset_lag`` is
0 (the log end is the high watermark on a single node) and ``is_future_key``
false (no AlterReplicaLogDirs moves). The metadata log is not a partition
log and is not listed. v3+ carry a top-level error code (0); v4 the volume's
``total_bytes`` and ``usable_bytes`` (statvfs: bytes available to this
process). A directory that cannot be read, or that went offline after a
failed write (broker/replica/log_dirs.py), answers KAFKA_STORAGE_ERROR with no
partitions, as Kafka's does.

With an authorizer: DESCRIBE on the cluster, else no results and (v3+) the
top-level code CLUSTER_AUTHORIZATION_FAILED, as Kafka answers.

Leadership: none needed. It reports what this broker's own directories
hold, for leaders and followers alike (as Kafka does), and changes nothing.
"""

from __future__ import annotations

import os

from broker.security.authorization import cluster_allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeLogDirs"]
R = struct_classes(API.response)


def register(dispatcher, broker) -> None:
    logs = broker.logs

    def handle(ctx, request):
        if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
            return R.DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
        if request.topics is None:
            wanted = logs.partitions()
        else:
            wanted = list(dict.fromkeys((t.topic, p) for t in request.topics for p in t.partitions))
        by_dir: dict = {}
        for topic, partition in wanted:
            directory = logs.log_dir_of(topic, partition)
            if directory is None:
                continue
            size = logs.size_bytes(topic, partition)
            by_dir.setdefault(directory, {}).setdefault(topic, []).append(
                R.DescribeLogDirsPartition(partition_index=partition, partition_size=size, offset_lag=0, is_future_key=False)
            )
        results = []
        for directory in logs.log_dirs:
            path = os.path.abspath(directory)
            if directory in logs.offline_dirs:
                results.append(R.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=path, topics=[]))
                continue
            try:
                stats = os.statvfs(path)
            except OSError:
                results.append(R.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=path, topics=[]))
                continue
            topics = [
                R.DescribeLogDirsTopic(name=name, partitions=sorted(partitions, key=lambda p: p.partition_index))
                for name, partitions in sorted(by_dir.get(directory, {}).items())
            ]
            results.append(
                R.DescribeLogDirsResult(
                    error_code=ErrorCode.NONE,
                    log_dir=path,
                    topics=topics,
                    total_bytes=stats.f_blocks * stats.f_frsize,
                    usable_bytes=stats.f_bavail * stats.f_frsize,
                )
            )
        return R.DescribeLogDirsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)

    dispatcher.register(API.key, 0, 4, handle)
