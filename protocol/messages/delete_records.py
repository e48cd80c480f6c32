"""DeleteRecords (key 21): advance partitions' log start offsets, discarding the records before them."""

from protocol.schema import INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        21, "DeleteRecords", "0-2", flexible="2+",
        request=[
            F("topics", Array(Struct("DeleteRecordsTopic", [
                F("name", STRING),
                F("partitions", Array(Struct("DeleteRecordsPartition", [
                    F("partition_index", INT32),
                    F("offset", INT64),
                ]))),
            ]))),
            F("timeout_ms", INT32),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("topics", Array(Struct("DeleteRecordsTopicResult", [
                F("name", STRING),
                F("partitions", Array(Struct("DeleteRecordsPartitionResult", [
                    F("partition_index", INT32),
                    F("low_watermark", INT64),
                    F("error_code", INT16),
                ]))),
            ]))),
        ],
    ),
]
