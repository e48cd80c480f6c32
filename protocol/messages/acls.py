"""DescribeAcls, CreateAcls and DeleteAcls (keys 29-31): list, add and remove access control entries."""

from protocol.schema import INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        29, "DescribeAcls", "0-3", flexible="2+",
        request=[
            F("resource_type_filter", INT8),
            F("resource_name_filter", STRING, nullable="0+"),
            # Absent before v1, when every resource name was literal: 3 is LITERAL.
            F("pattern_type_filter", INT8, "1+", default=3),
            F("principal_filter", STRING, nullable="0+"),
            F("host_filter", STRING, nullable="0+"),
            F("operation", INT8),
            F("permission_type", INT8),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("resources", Array(Struct("DescribeAclsResource", [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("pattern_type", INT8, "1+", default=3),
                F("acls", Array(Struct("AclDescription", [
                    F("principal", STRING),
                    F("host", STRING),
                    F("operation", INT8),
                    F("permission_type", INT8),
                ]))),
            ]))),
        ],
    ),
    Api(
        30, "CreateAcls", "0-3", flexible="2+",
        request=[
            F("creations", Array(Struct("AclCreation", [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("resource_pattern_type", INT8, "1+", default=3),
                F("principal", STRING),
                F("host", STRING),
                F("operation", INT8),
                F("permission_type", INT8),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("AclCreationResult", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ]))),
        ],
    ),
    Api(
        31, "DeleteAcls", "0-3", flexible="2+",
        request=[
            F("filters", Array(Struct("DeleteAclsFilter", [
                F("resource_type_filter", INT8),
                F("resource_name_filter", STRING, nullable="0+"),
                F("pattern_type_filter", INT8, "1+", default=3),
                F("principal_filter", STRING, nullable="0+"),
                F("host_filter", STRING, nullable="0+"),
                F("operation", INT8),
                F("permission_type", INT8),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("filter_results", Array(Struct("DeleteAclsFilterResult", [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("matching_acls", Array(Struct("DeleteAclsMatchingAcl", [
                    F("error_code", INT16),
                    F("error_message", STRING, nullable="0+"),
                    F("resource_type", INT8),
                    F("resource_name", STRING),
                    F("pattern_type", INT8, "1+", default=3),
                    F("principal", STRING),
                    F("host", STRING),
                    F("operation", INT8),
                    F("permission_type", INT8),
                ]))),
            ]))),
        ],
    ),
]
