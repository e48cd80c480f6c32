"""ShareFetch and ShareAcknowledge (keys 78-79): share-group consumers fetch records and settle their delivery.

Version 1 (Kafka 4.1, the first stable one) drops ShareFetch's per-partition
max bytes and adds MaxRecords and BatchSize to the request and the
acquisition lock's duration to the response; ShareAcknowledge v1 is v0.
"""

from protocol.schema import INT8, INT16, INT32, INT64, RECORDS, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        78, "ShareFetch", "0-1", flexible="0+",
        request=[
            F("group_id", STRING, nullable="0+", default=None),
            F("member_id", STRING, nullable="0+"),
            F("share_session_epoch", INT32),
            F("max_wait_ms", INT32),
            F("min_bytes", INT32),
            F("max_bytes", INT32, default=0x7FFFFFFF),
            F("max_records", INT32, "1+"),
            F("batch_size", INT32, "1+"),
            F("topics", Array(Struct("FetchTopic", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("FetchPartition", [
                    F("partition_index", INT32),
                    F("partition_max_bytes", INT32, "0"),
                    # Acknowledgements of earlier deliveries ride along with the next fetch.
                    F("acknowledgement_batches", Array(Struct("AcknowledgementBatch", [
                        F("first_offset", INT64),
                        F("last_offset", INT64),
                        F("acknowledge_types", Array(INT8)),
                    ]))),
                ]))),
            ]))),
            F("forgotten_topics_data", Array(Struct("ForgottenTopic", [
                F("topic_id", UUID),
                F("partitions", Array(INT32)),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("acquisition_lock_timeout_ms", INT32, "1+"),
            F("responses", Array(Struct("ShareFetchableTopicResponse", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("acknowledge_error_code", INT16),
                    F("acknowledge_error_message", STRING, nullable="0+", default=None),
                    F("current_leader", Struct("LeaderIdAndEpoch", [
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ])),
                    F("records", RECORDS, nullable="0+"),
                    F("acquired_records", Array(Struct("AcquiredRecords", [
                        F("first_offset", INT64),
                        F("last_offset", INT64),
                        F("delivery_count", INT16),
                    ]))),
                ]))),
            ]))),
            F("node_endpoints", Array(Struct("NodeEndpoint", [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
    Api(
        79, "ShareAcknowledge", "0-1", flexible="0+",
        request=[
            F("group_id", STRING, nullable="0+", default=None),
            F("member_id", STRING, nullable="0+"),
            F("share_session_epoch", INT32),
            F("topics", Array(Struct("AcknowledgeTopic", [
                F("topic_id", UUID),
                F("partitions", Array(Struct("AcknowledgePartition", [
                    F("partition_index", INT32),
                    F("acknowledgement_batches", Array(Struct("AcknowledgementBatch", [
                        F("first_offset", INT64),
                        F("last_offset", INT64),
                        F("acknowledge_types", Array(INT8)),
                    ]))),
                ]))),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32, ignorable=True),
            F("error_code", INT16, ignorable=True),
            F("error_message", STRING, nullable="0+", default=None),
            F("responses", Array(Struct("ShareAcknowledgeTopicResponse", [
                F("topic_id", UUID, ignorable=True),
                F("partitions", Array(Struct("PartitionData", [
                    F("partition_index", INT32),
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+", default=None),
                    F("current_leader", Struct("LeaderIdAndEpoch", [
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ])),
                ]))),
            ]))),
            F("node_endpoints", Array(Struct("NodeEndpoint", [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=None),
            ]))),
        ],
    ),
]
