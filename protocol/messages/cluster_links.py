"""pybroker's own APIs for cluster links and mirror topics (keys 16000-16008).

Apache Kafka has no cluster links (KIP-1279 is still a proposal), so these
APIs are pybroker's: the ``pybroker cluster-links`` and ``pybroker mirrors``
tools and the REST resources speak them. Their keys sit far above Kafka's
(which stay below 100), and a Kafka client that reads them in an ApiVersions
answer skips keys it does not know. A link's *source* cluster is never asked
any of these: mirroring reads it with public APIs only.

Errors are Kafka's codes: RESOURCE_NOT_FOUND (an unknown link or mirror),
DUPLICATE_RESOURCE (a link name taken), TOPIC_ALREADY_EXISTS, INVALID_CONFIG,
INVALID_REQUEST (a state change the mirror's state does not allow),
CLUSTER_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED, with a message.
"""

from protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, UUID, Api, Array, F, Struct

PRIVATE_API_KEY_MIN = 16000

# AlterClusterLinks config operations.
LINK_CONFIG_SET = 0
LINK_CONFIG_DELETE = 1

# AlterMirrors operations.
MIRROR_OP_PAUSE = 0
MIRROR_OP_RESUME = 1
MIRROR_OP_PROMOTE = 2
MIRROR_OP_FAILOVER = 3

MIRROR_OP_NAMES = {
    MIRROR_OP_PAUSE: "pause",
    MIRROR_OP_RESUME: "resume",
    MIRROR_OP_PROMOTE: "promote",
    MIRROR_OP_FAILOVER: "failover",
}


def _config(name: str, *, nullable_value: bool = False, extra: list | None = None) -> Struct:
    value = F("value", STRING, nullable="0+", default=None) if nullable_value else F("value", STRING)
    return Struct(name, [F("name", STRING), value] + (extra or []))


APIS = [
    Api(
        16000, "CreateClusterLinks", "0", flexible="0+",
        request=[
            F("links", Array(Struct("CreatableLink", [
                F("link_name", STRING),
                F("configs", Array(_config("CreatableLinkConfig"))),
            ]))),
            F("validate_only", BOOL),
            F("timeout_ms", INT32, default=30000),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("CreatableLinkResult", [
                F("link_name", STRING),
                F("link_id", UUID),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        16001, "DescribeClusterLinks", "0", flexible="0+",
        request=[
            # Null: every link.
            F("link_names", Array(STRING), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("results", Array(Struct("DescribedLink", [
                F("link_name", STRING),
                F("link_id", UUID),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                # Secrets (passwords, JAAS configs, keys) come back with a null value.
                F("configs", Array(_config("DescribedLinkConfig", nullable_value=True, extra=[F("sensitive", BOOL)]))),
                F("mirror_topics", Array(STRING)),
            ]))),
        ],
    ),
    Api(
        16002, "DeleteClusterLinks", "0", flexible="0+",
        request=[
            F("link_names", Array(STRING)),
            # Without force a link that still has mirror topics in a state that
            # copies (active, paused, pending) is not deleted.
            F("force", BOOL),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("DeletedLinkResult", [
                F("link_name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        16003, "AlterClusterLinks", "0", flexible="0+",
        request=[
            F("links", Array(Struct("AlterableLink", [
                F("link_name", STRING),
                F("configs", Array(_config("AlterableLinkConfig", nullable_value=True, extra=[F("operation", INT8)]))),
            ]))),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("AlterableLinkResult", [
                F("link_name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        16004, "CreateMirrorTopics", "0", flexible="0+",
        request=[
            F("topics", Array(Struct("CreatableMirror", [
                F("mirror_topic", STRING),
                F("link_name", STRING),
                # Null: the source topic has the mirror's name.
                F("source_topic", STRING, nullable="0+", default=None),
                # -1: the destination's default.replication.factor.
                F("replication_factor", INT16, default=-1),
                # Topic configs of the mirror that are not synced from the source.
                F("configs", Array(_config("CreatableMirrorConfig"))),
                # Failback: ``mirror_topic`` exists here (the old source of a
                # mirror failed over or promoted on the link's source cluster);
                # it becomes a mirror again, each replica cut back to where the
                # source's mirror stopped. With ``validate_only`` only the report.
                F("failback", BOOL, default=False),
            ]))),
            F("validate_only", BOOL),
            F("timeout_ms", INT32, default=30000),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("CreatableMirrorResult", [
                F("mirror_topic", STRING),
                F("topic_id", UUID),
                F("num_partitions", INT32, default=-1),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                # A failback's report, per partition (empty otherwise).
                F("failback_partitions", Array(Struct("FailbackPartition", [
                    F("partition_index", INT32),
                    # Where the source's mirror stopped (the cut point here).
                    F("stop_offset", INT64),
                    F("stop_epoch", INT32, default=-1),
                    # This cluster's log end before the cut.
                    F("log_end_offset", INT64, default=-1),
                    # Records after the stop offset, removed by the cut.
                    F("records_removed", INT64, default=0),
                ]))),
            ]))),
        ],
    ),
    Api(
        16005, "AlterMirrors", "0", flexible="0+",
        request=[
            F("operation", INT8),
            F("topics", Array(STRING)),
            F("validate_only", BOOL),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("AlterMirrorResult", [
                F("mirror_topic", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        # Answered by every broker for the mirror partitions it leads (and, for
        # a stopped mirror, from the marks the controller keeps): a tool asks
        # each broker and joins the answers, as for DescribeLogDirs.
        16006, "DescribeMirrors", "0", flexible="0+",
        request=[
            # Null: every mirror topic.
            F("topics", Array(STRING), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("topics", Array(Struct("DescribedMirror", [
                F("mirror_topic", STRING),
                F("error_code", INT16),
                F("link_name", STRING),
                F("source_topic", STRING),
                F("state", INT8),
                F("reason", STRING, nullable="0+", default=None),
                F("partitions", Array(Struct("DescribedMirrorPartition", [
                    F("partition_index", INT32),
                    F("leader_id", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("local_log_end_offset", INT64, default=-1),
                    F("local_high_watermark", INT64, default=-1),
                    F("source_high_watermark", INT64, default=-1),
                    F("lag_records", INT64, default=-1),
                    # Milliseconds since this partition last held everything the
                    # source had committed (0 while it does).
                    F("lag_ms", INT64, default=-1),
                    # Wall-clock time of the last answer from the source, -1 never.
                    F("last_fetch_ms", INT64, default=-1),
                    # Where a stopped mirror stopped (-1: not stopped).
                    F("stop_offset", INT64, default=-1),
                    # Leader epoch of the batch before ``stop_offset`` (-1: none).
                    F("stop_epoch", INT32, default=-1),
                ]))),
            ]))),
        ],
    ),
    Api(
        # Broker to active controller: these mirror partitions, led by the
        # broker, stopped copying at ``offset`` (every in-sync replica holds
        # the records before it) after a promote or failover.
        16007, "MirrorPartitionsStopped", "0", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64),
            F("topics", Array(Struct("StoppedMirrorTopic", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("StoppedMirrorPartition", [
                    F("partition_index", INT32),
                    F("leader_epoch", INT32),
                    F("offset", INT64),
                    # Leader epoch of the batch before ``offset`` (-1: empty log).
                    F("last_epoch", INT32),
                    # Largest producer id in the partition's mirrored records (-1: none).
                    F("max_producer_id", INT64, default=-1),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
        ],
    ),
    Api(
        # Broker to active controller: what a broker that watches a mirror's
        # source topic saw there. The change applies only while the mirror's
        # state is ``expected_state`` (a promote that raced it wins); a larger
        # ``source_partition_count`` adds partitions to the mirror; ``configs``
        # sets (or, with a null value, removes) synced topic configs.
        16008, "UpdateMirrorTopic", "0", flexible="0+",
        request=[
            F("broker_id", INT32),
            F("broker_epoch", INT64),
            F("topic_id", UUID),
            F("expected_state", INT8),
            # -1: the state does not change.
            F("state", INT8, default=-1),
            F("reason", STRING, nullable="0+", default=None),
            # -1: the partition count does not change.
            F("source_partition_count", INT32, default=-1),
            F("configs", Array(_config("SyncedTopicConfig", nullable_value=True))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
        ],
    ),
    Api(
        # Answered by every broker for the multi-master partitions it leads and
        # copies in from a link's source: a tool asks each broker and joins.
        16009, "DescribeMultiMasterCopies", "0", flexible="0+",
        request=[
            # Null: every link.
            F("links", Array(STRING), nullable="0+", default=None),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("copies", Array(Struct("MultiMasterCopy", [
                F("link_name", STRING),
                F("topic", STRING),
                F("partition_index", INT32),
                F("leader_id", INT32),
                # True once the copy stopped on a sequence gap (until the
                # leadership or the link's settings change).
                F("stopped", BOOL),
                # Why it stopped, or the last round's passing problem.
                F("error_message", STRING, nullable="0+", default=None),
                # The next source offset to read (-1: not known yet).
                F("source_position", INT64, default=-1),
                F("source_high_watermark", INT64, default=-1),
                F("lag_records", INT64, default=-1),
                # Milliseconds since the copy last read all the source had (0 while it does).
                F("lag_ms", INT64, default=-1),
                # Wall-clock time of the source's last answer (-1: none yet).
                F("last_fetch_ms", INT64, default=-1),
                F("copied_batches", INT64, default=0),
                # Batches fetched and not copied: already here, this cluster's own, control.
                F("skipped_batches", INT64, default=0),
            ]))),
        ],
    ),
]
