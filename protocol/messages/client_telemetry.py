"""GetTelemetrySubscriptions, PushTelemetry and ListClientMetricsResources (keys 71, 72, 74): client metrics pushed to the broker."""

from protocol.schema import BOOL, BYTES, INT8, INT16, INT32, STRING, UUID, Api, Array, F, Struct

APIS = [
    Api(
        71, "GetTelemetrySubscriptions", "0", flexible="0+",
        request=[
            # The zero UUID on a client's first request: the broker then assigns one.
            F("client_instance_id", UUID),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("client_instance_id", UUID),
            F("subscription_id", INT32),
            F("accepted_compression_types", Array(INT8)),
            F("push_interval_ms", INT32),
            F("telemetry_max_bytes", INT32),
            F("delta_temporality", BOOL),
            F("requested_metrics", Array(STRING)),
        ],
    ),
    Api(
        72, "PushTelemetry", "0", flexible="0+",
        request=[
            F("client_instance_id", UUID),
            F("subscription_id", INT32),
            F("terminating", BOOL),
            F("compression_type", INT8),
            # An OpenTelemetry metrics payload, compressed as compression_type says.
            F("metrics", BYTES),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
        ],
    ),
    Api(
        74, "ListClientMetricsResources", "0", flexible="0+",
        request=[],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("client_metrics_resources", Array(Struct("ClientMetricsResource", [
                F("name", STRING),
            ]))),
        ],
    ),
]
