"""BrokerRegistration, BrokerHeartbeat, UnregisterBroker (keys 62-64): a KRaft broker's cluster membership.

BrokerHeartbeatRequest carries one field of pybroker's own, ``balancer_load``
(tagged field ``BALANCER_LOAD_TAG``, far above Apache Kafka's tags so a later
Kafka field cannot collide): what the active controller's balancer measures
by (controller/balancer/load_reports.py). Only pybroker brokers heartbeat to
pybroker controllers; a broker that sends none (null, the default) sends no
tag at all, and any other reader skips an unknown tag.
"""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, UINT16, UUID, Api, Array, F, Struct

BALANCER_LOAD_TAG = 10000

APIS = [
    Api(
        62, "BrokerRegistration", "0-4", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("cluster_id", STRING),
            F("incarnation_id", UUID),
            F("listeners", Array(Struct("Listener", [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
                F("security_protocol", INT16),
            ]))),
            F("features", Array(Struct("Feature", [
                F("name", STRING),
                F("min_supported_version", INT16),
                F("max_supported_version", INT16),
            ]))),
            F("rack", STRING, nullable="0+"),
            F("is_migrating_zk_broker", BOOL, "1+", default=False),
            F("log_dirs", Array(UUID), "2+", ignorable=True),
            F("previous_broker_epoch", INT64, "3+", default=-1, ignorable=True),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("broker_epoch", INT64, default=-1),
        ],
    ),
    Api(
        63, "BrokerHeartbeat", "0-1", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64, default=-1),
            F("current_metadata_offset", INT64),
            F("want_fence", BOOL),
            F("want_shut_down", BOOL),
            F("offline_log_dirs", Array(UUID), "1+", tagged="1+", tag=0),
            F("balancer_load", Struct("BalancerLoad", [
                # statvfs of the file systems holding log.dirs, each counted once.
                F("disk_capacity_bytes", INT64),
                F("disk_used_bytes", INT64),
                # Client traffic as Kafka's BytesInPerSec/BytesOutPerSec count it; -1: not measured.
                F("bytes_in_per_second", INT64, default=-1),
                F("bytes_out_per_second", INT64, default=-1),
                # Every replica's bytes on disk; null: unchanged since the last report that had them.
                F("partition_sizes", Array(Struct("TopicSizes", [
                    F("topic", STRING),
                    F("partitions", Array(Struct("PartitionSize", [
                        F("partition_index", INT32),
                        F("size_bytes", INT64),
                    ]))),
                ])), nullable="0+", default=None),
            ]), nullable="0+", tagged="0+", tag=BALANCER_LOAD_TAG, default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("is_caught_up", BOOL, default=False),
            # A broker stays fenced until the controller says otherwise.
            F("is_fenced", BOOL, default=True),
            F("should_shut_down", BOOL),
        ],
    ),
    Api(
        64, "UnregisterBroker", "0", flexible="0+",
        request=[
            F("broker_id", INT32),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
        ],
    ),
]
