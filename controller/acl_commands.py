"""CreateAcls, DeleteAcls and DescribeAcls as pure functions of the metadata image.

As in controller.config_commands, nothing here writes: the controller proposes
the records and answers once they are committed (DescribeAcls only reads).
Requests and answers are the wire values of ``protocol.messages.acls``.

CreateAcls (Kafka's AclControlManager, with the checks its brokers make
first): each creation is refused with INVALID_REQUEST when its resource type
is UNKNOWN or ANY (or a code Kafka does not define), its pattern type anything
but LITERAL or PREFIXED, its operation UNKNOWN or ANY, its permission anything
but DENY or ALLOW, its resource name empty, a CLUSTER resource not named
"kafka-cluster", or its principal not "Type:name". A binding that exists
already (or earlier in the request) succeeds without a second record; every
other one becomes an AccessControlEntryRecord under a new id. A request that
would write more than 10,000 records is refused whole (POLICY_VIOLATION), as
Kafka refuses an excessively large batch.

DeleteAcls: per filter, INVALID_REQUEST for an UNKNOWN part; otherwise every
ACL the filter matches (see ``AclBindingFilter``: null fields and ANY match
anything, MATCH selects the ACLs that apply to a resource) is listed in that
filter's result and removed. An ACL matched by several filters is listed by
each and removed once. A filter whose removals would take the request past
10,000 records fails (UNKNOWN_SERVER_ERROR, Kafka's answer) and removes
nothing; Kafka's controller would still write the removals it had gathered
for that filter, which its answer says did not happen.

DescribeAcls: the matching bindings grouped by resource pattern (sorted, for
stable answers; equal bindings under two ids appear once), or
INVALID_REQUEST for a filter with an UNKNOWN part. Kafka refuses that while
parsing the request; answering it is kinder to the client.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from controller.authorizer import (
    CLUSTER_NAME,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    known,
    parse_principal,
)
from controller.metadata.image import AclBinding, MetadataImage, acl_entry_record
from controller.metadata.records import REMOVE_ACCESS_CONTROL_ENTRY_RECORD
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one request's records fit one batch.
MAX_RECORDS_PER_REQUEST = 10_000
_NEW_ID_ATTEMPTS = 100

_CREATE = struct_classes(APIS_BY_NAME["CreateAcls"].response)
_DELETE = struct_classes(APIS_BY_NAME["DeleteAcls"].response)
_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeAcls"].response)


def binding_of_creation(creation) -> AclBinding:
    """The binding a CreateAcls creation asks for (codes as sent)."""
    return AclBinding(
        creation.resource_type,
        creation.resource_name,
        creation.resource_pattern_type,
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


def creation_error(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create ``acl`` (INVALID_REQUEST), or None."""
    resource_type = known(ResourceType, acl.resource_type)
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {resource_type.name}"
    pattern_type = known(PatternType, acl.pattern_type)
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern_type.name}"
    operation = known(AclOperation, acl.operation)
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {operation.name}"
    permission = known(AclPermissionType, acl.permission_type)
    if permission not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {permission.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    try:
        parse_principal(acl.principal)
    except ValueError as exc:
        return f"Invalid principal: {exc}"
    return None


def _new_acl_id(taken, new_id: Callable[[], uuid.UUID]) -> uuid.UUID:
    for _ in range(_NEW_ID_ATTEMPTS):
        candidate = new_id()
        if candidate != ZERO_UUID and candidate not in taken:
            return candidate
    raise RuntimeError(f"no unused ACL id after {_NEW_ID_ATTEMPTS} attempts: is the id source random?")


def acl_record(acl_id: uuid.UUID, acl: AclBinding):
    return acl_entry_record(acl_id, acl)


def plan_create_acls(image: MetadataImage, request, *, new_id: Callable[[], uuid.UUID] = uuid.uuid4):
    """(CreateAclsResponse, AccessControlEntryRecords) for a decoded CreateAcls request.

    ``new_id`` makes the ids of new ACLs (random by default; ids the image or
    this request already uses, and the zero id, are drawn again)."""
    existing = set(image.acls.values())
    taken = set(image.acls)
    results = []
    records = []
    for creation in request.creations:
        acl = binding_of_creation(creation)
        problem = creation_error(acl)
        if problem is not None:
            results.append(_CREATE.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem))
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = _new_acl_id(taken, new_id)
            taken.add(acl_id)
            records.append(acl_record(acl_id, acl))
        results.append(_CREATE.AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
    if len(records) > MAX_RECORDS_PER_REQUEST:
        refused = [
            _CREATE.AclCreationResult(
                error_code=ErrorCode.POLICY_VIOLATION,
                error_message="Unable to perform excessively large batch operation.",
            )
            for _ in request.creations
        ]
        return _CREATE.CreateAclsResponse(throttle_time_ms=0, results=refused), []
    return _CREATE.CreateAclsResponse(throttle_time_ms=0, results=results), records


def _matching_acl(acl: AclBinding):
    return _DELETE.DeleteAclsMatchingAcl(
        error_code=ErrorCode.NONE,
        error_message=None,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern_type=acl.pattern_type,
        principal=acl.principal,
        host=acl.host,
        operation=acl.operation,
        permission_type=acl.permission_type,
    )


def plan_delete_acls(image: MetadataImage, request):
    """(DeleteAclsResponse, RemoveAccessControlEntryRecords) for a decoded DeleteAcls request."""
    removed: set[uuid.UUID] = set()
    records = []
    results = []
    ordered = sorted(image.acls.items())  # by id: stable answers
    for wire_filter in request.filters:
        acl_filter = AclBindingFilter.from_wire(wire_filter)
        problem = acl_filter.unknown_part()
        if problem is not None:
            results.append(
                _DELETE.DeleteAclsFilterResult(
                    error_code=ErrorCode.INVALID_REQUEST, error_message=problem, matching_acls=[]
                )
            )
            continue
        matched = [(acl_id, acl) for acl_id, acl in ordered if acl_filter.matches(acl)]
        fresh = [acl_id for acl_id, _ in matched if acl_id not in removed]
        if len(removed) + len(fresh) > MAX_RECORDS_PER_REQUEST:
            results.append(
                _DELETE.DeleteAclsFilterResult(
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                    error_message=(
                        f"Cannot remove more than {MAX_RECORDS_PER_REQUEST} acls in a single delete operation."
                    ),
                    matching_acls=[],
                )
            )
            continue
        removed.update(fresh)
        records.extend(REMOVE_ACCESS_CONTROL_ENTRY_RECORD(id=acl_id) for acl_id in fresh)
        results.append(
            _DELETE.DeleteAclsFilterResult(
                error_code=ErrorCode.NONE, error_message=None, matching_acls=[_matching_acl(acl) for _, acl in matched]
            )
        )
    return _DELETE.DeleteAclsResponse(throttle_time_ms=0, filter_results=results), records


def describe_acls(image: MetadataImage, request):
    """DescribeAclsResponse for a decoded DescribeAcls request (filter fields at its top level)."""
    acl_filter = AclBindingFilter.from_wire(request)
    problem = acl_filter.unknown_part()
    if problem is not None:
        return _DESCRIBE.DescribeAclsResponse(
            throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[]
        )
    by_pattern: dict[tuple[int, str, int], set[tuple[str, str, int, int]]] = {}
    for acl in image.acls.values():
        if acl_filter.matches(acl):
            entries = by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), set())
            entries.add((acl.principal, acl.host, acl.operation, acl.permission_type))
    resources = [
        _DESCRIBE.DescribeAclsResource(
            resource_type=resource_type,
            resource_name=resource_name,
            pattern_type=pattern_type,
            acls=[
                _DESCRIBE.AclDescription(
                    principal=principal, host=host, operation=operation, permission_type=permission
                )
                for principal, host, operation, permission in sorted(
                    by_pattern[(resource_type, resource_name, pattern_type)]
                )
            ],
        )
        for resource_type, resource_name, pattern_type in sorted(by_pattern)
    ]
    return _DESCRIBE.DescribeAclsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=resources
    )
