"""DescribeCluster (key 60): the cluster id, controller and brokers (or controllers) of the cluster."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        60, "DescribeCluster", "0-1", flexible="0+",
        request=[
            F("include_cluster_authorized_operations", BOOL),
            F("endpoint_type", INT8, "1+", default=1),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("endpoint_type", INT8, "1+", default=1),
            F("cluster_id", STRING),
            F("controller_id", INT32, default=-1),
            F("brokers", Array(Struct("DescribeClusterBroker", [
                F("broker_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=None),
            ]))),
            F("cluster_authorized_operations", INT32, default=-2147483648),
        ],
    ),
]
