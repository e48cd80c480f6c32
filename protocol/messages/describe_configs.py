"""DescribeConfigs (key 32): read the configuration of topics, brokers and other resources."""

from protocol.schema import BOOL, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        32, "DescribeConfigs", "0-4", flexible="4+",
        request=[
            F("resources", Array(Struct("DescribeConfigsResource", [
                F("resource_type", INT8),
                F("resource_name", STRING),
                # null asks for every key of the resource.
                F("configuration_keys", Array(STRING), nullable="0+"),
            ]))),
            F("include_synonyms", BOOL, "1+", default=False),
            F("include_documentation", BOOL, "3+", default=False),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("DescribeConfigsResult", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configs", Array(Struct("DescribeConfigsResourceResult", [
                    F("name", STRING),
                    F("value", STRING, nullable="0+"),
                    F("read_only", BOOL),
                    # v0 only; replaced by config_source from v1.
                    F("is_default", BOOL, "0"),
                    F("config_source", INT8, "1+", default=-1, ignorable=True),
                    F("is_sensitive", BOOL),
                    F("synonyms", Array(Struct("DescribeConfigsSynonym", [
                        F("name", STRING, "1+"),
                        F("value", STRING, "1+", nullable="0+"),
                        F("source", INT8, "1+"),
                    ])), "1+", ignorable=True),
                    F("config_type", INT8, "3+", default=0, ignorable=True),
                    F("documentation", STRING, "3+", nullable="0+", ignorable=True),
                ]))),
            ]))),
        ],
    ),
]
