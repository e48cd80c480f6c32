"""``pybroker acls``: add, remove and list ACLs, as kafka-acls.sh does.

``--add`` builds one ACL per (resource, principal, host, operation): the
resources named with ``--topic``, ``--group``, ``--cluster`` and
``--transactional-id`` (each repeatable), LITERAL unless
``--resource-pattern-type prefixed``; ``--allow-principal`` with its
``--allow-host``s and ``--deny-principal`` with its ``--deny-host``s (hosts
default to ``*``); ``--operation``s (default All). ``--producer`` and
``--consumer`` stand for Kafka's sets: WRITE, DESCRIBE and CREATE on the
topics (plus WRITE and DESCRIBE on ``--transactional-id``s, and
IDEMPOTENT_WRITE on the cluster with ``--idempotent``); READ and DESCRIBE on
the topics and READ on the ``--group``s. The ACLs go in one CreateAcls
request; after it the resources' ACLs are listed.

``--remove`` deletes with one filter per ACL it would have added, or, with no
principal given, every ACL of each named resource. It asks for a "y" on
stdin first unless ``--force``. ``--list`` prints every ACL, or those of the
named resources (``--resource-pattern-type any|match|literal|prefixed``
filters as DescribeAcls does; ``--principal`` narrows to principals).

Output lines follow kafka-acls.sh: ``Current ACLs for resource
`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:``
then one ``(principal=..., host=..., operation=..., permissionType=...)``
line per ACL. A broker without an authorizer answers SECURITY_DISABLED: one
line, exit code 1.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from controller.authorizer import CLUSTER_NAME, WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_CREATE = struct_classes(APIS_BY_NAME["CreateAcls"].request)
_DELETE = struct_classes(APIS_BY_NAME["DeleteAcls"].request)
ACL_API_VERSION = 3  # every ACL API's newest version, served by Kafka 2.8+ and pybroker

PRODUCER_TOPIC_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
PRODUCER_TXN_OPERATIONS = (AclOperation.WRITE, AclOperation.DESCRIBE)
CONSUMER_TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE)
CONSUMER_GROUP_OPERATIONS = (AclOperation.READ,)
_PRINCIPAL = re.compile(r"^[^:]+:.+$")


@dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str
    pattern: PatternType

    def text(self) -> str:
        return f"ResourcePattern(resourceType={self.type.name}, name={self.name}, patternType={self.pattern.name})"


@dataclass(frozen=True)
class Acl:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def text(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


def parse_operation(text: str) -> AclOperation:
    """Kafka's spellings: ``Read``, ``DescribeConfigs``, ``IDEMPOTENT_WRITE``, ``all`` (any case)."""
    name = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text.strip()).upper().replace("-", "_")
    try:
        operation = AclOperation[name]
    except KeyError:
        operation = None
    if operation in (None, AclOperation.UNKNOWN, AclOperation.ANY):
        valid = ", ".join(o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY))
        raise ToolError(f"--operation {text}: not an ACL operation (one of {valid})")
    return operation


def parse_principal(text: str) -> str:
    if not _PRINCIPAL.match(text):
        raise ToolError(f"principal {text!r}: expected TYPE:NAME, e.g. User:alice")
    return text


def parse_pattern(text: str, *, for_filter: bool) -> PatternType:
    choices = ("any", "match", "literal", "prefixed") if for_filter else ("literal", "prefixed")
    if text.lower() not in choices:
        raise ToolError(f"--resource-pattern-type {text}: expected one of {', '.join(choices)}")
    return PatternType[text.upper()]


def resources_of(args, pattern: PatternType) -> list[Resource]:
    resources = [Resource(ResourceType.TOPIC, t, pattern) for t in args.topic or []]
    resources += [Resource(ResourceType.GROUP, g, pattern) for g in args.group or []]
    resources += [Resource(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id or []]
    if args.cluster:
        # The cluster is one resource with a literal name, whatever the pattern asked.
        resources.append(Resource(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return resources


def acls_to_add(args) -> dict[Resource, list[Acl]]:
    """What ``--add`` (and ``--remove`` with principals) means: ACLs per resource."""
    pattern = parse_pattern(args.resource_pattern_type, for_filter=False)
    grants: list[tuple[str, AclPermissionType, list[str]]] = []
    for principal in args.allow_principal or []:
        grants.append((parse_principal(principal), AclPermissionType.ALLOW, args.allow_host or [WILDCARD]))
    for principal in args.deny_principal or []:
        grants.append((parse_principal(principal), AclPermissionType.DENY, args.deny_host or [WILDCARD]))
    if not grants:
        raise ToolError("--add needs --allow-principal or --deny-principal")
    wanted: dict[Resource, list[AclOperation]] = {}
    if args.producer or args.consumer:
        if args.operation:
            raise ToolError("--operation does not go with --producer or --consumer")
        if not args.topic:
            raise ToolError("--producer and --consumer need --topic")
        for topic in args.topic:
            operations = wanted.setdefault(Resource(ResourceType.TOPIC, topic, pattern), [])
            if args.producer:
                operations += PRODUCER_TOPIC_OPERATIONS
            if args.consumer:
                operations += [o for o in CONSUMER_TOPIC_OPERATIONS if o not in operations]
        if args.producer:
            for txn in args.transactional_id or []:
                wanted[Resource(ResourceType.TRANSACTIONAL_ID, txn, pattern)] = list(PRODUCER_TXN_OPERATIONS)
            if args.idempotent:
                wanted[Resource(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = [AclOperation.IDEMPOTENT_WRITE]
        if args.consumer:
            if not args.group:
                raise ToolError("--consumer needs --group")
            for group in args.group:
                wanted[Resource(ResourceType.GROUP, group, pattern)] = list(CONSUMER_GROUP_OPERATIONS)
    else:
        resources = resources_of(args, pattern)
        if not resources:
            raise ToolError("name a resource: --topic, --group, --transactional-id or --cluster")
        operations = [parse_operation(o) for o in args.operation or ["All"]]
        for resource in resources:
            wanted[resource] = list(dict.fromkeys(operations))
    return {
        resource: [Acl(p, host, op, permission) for p, permission, hosts in grants for host in hosts for op in operations]
        for resource, operations in wanted.items()
    }


class AclsTool(ToolClient):
    """CreateAcls, DeleteAcls and DescribeAcls against the bootstrap broker."""

    def describe(self, resource_type: int, name: str | None, pattern: int, principal: str | None = None):
        response = self.bootstrap_connection().call(
            "DescribeAcls", ACL_API_VERSION, resource_type_filter=resource_type, resource_name_filter=name,
            pattern_type_filter=pattern, principal_filter=principal, host_filter=None,
            operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
        )
        _raise_for(response.error_code, response.error_message, "DescribeAcls")
        return {
            Resource(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type)): [
                Acl(a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type)) for a in r.acls
            ]
            for r in response.resources
        }

    def create(self, acls: dict[Resource, list[Acl]]) -> None:
        creations = [
            _CREATE.AclCreation(
                resource_type=resource.type, resource_name=resource.name, resource_pattern_type=resource.pattern,
                principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission,
            )
            for resource, entries in acls.items()
            for acl in entries
        ]
        response = self.bootstrap_connection().call("CreateAcls", ACL_API_VERSION, creations=creations)
        for result in response.results:
            _raise_for(result.error_code, result.error_message, "CreateAcls")

    def delete(self, filters: list[tuple[Resource, Acl | None]]) -> int:
        """One filter per (resource, acl); acl None deletes every ACL of the resource. The count deleted."""
        request_filters = [
            _DELETE.DeleteAclsFilter(
                resource_type_filter=resource.type, resource_name_filter=resource.name,
                pattern_type_filter=resource.pattern,
                principal_filter=acl.principal if acl else None, host_filter=acl.host if acl else None,
                operation=acl.operation if acl else AclOperation.ANY,
                permission_type=acl.permission if acl else AclPermissionType.ANY,
            )
            for resource, acl in filters
        ]
        response = self.bootstrap_connection().call("DeleteAcls", ACL_API_VERSION, filters=request_filters)
        deleted = 0
        for result in response.filter_results:
            _raise_for(result.error_code, result.error_message, "DeleteAcls")
            deleted += len(result.matching_acls)
        return deleted


def _raise_for(error_code: int, message: str | None, api: str) -> None:
    if error_code == ErrorCode.NONE:
        return
    name = ErrorCode(error_code).name if error_code in ErrorCode._value2member_map_ else str(error_code)
    if error_code == ErrorCode.SECURITY_DISABLED:
        raise Refused("the broker has no authorizer (authorizer.class.name is not set): SECURITY_DISABLED")
    raise Refused(f"{api}: {name}" + (f": {message}" if message else ""))


def print_resources(acls: dict[Resource, list[Acl]], out=sys.stdout) -> None:
    for resource, entries in acls.items():
        print(f"Current ACLs for resource `{resource.text()}`: ", file=out)
        for acl in entries:
            print(f" \t{acl.text()} ", file=out)
        print(file=out)


def cmd_acls(args) -> int:
    actions = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(actions) != 1:
        print("pybroker acls: give exactly one of --add, --remove, --list", file=sys.stderr)
        return 2
    tool = None
    try:
        tool = AclsTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if args.add:
            acls = acls_to_add(args)
            for resource, entries in acls.items():
                print(f"Adding ACLs for resource `{resource.text()}`: ")
                for acl in entries:
                    print(f" \t{acl.text()} ")
                print()
            tool.create(acls)
            _list(tool, list(acls), None)
        elif args.remove:
            if args.allow_principal or args.deny_principal:
                filters = [(r, acl) for r, entries in acls_to_add(args).items() for acl in entries]
            else:
                resources = resources_of(args, parse_pattern(args.resource_pattern_type, for_filter=True))
                if not resources:
                    raise ToolError("--remove needs a resource: --topic, --group, --transactional-id or --cluster")
                filters = [(r, None) for r in resources]
            if not args.force and not _confirmed(filters):
                return 0
            tool.delete(filters)
            _list(tool, list(dict.fromkeys(r for r, _ in filters)), None)
        else:
            pattern = parse_pattern(args.resource_pattern_type, for_filter=True)
            principals = [parse_principal(p) for p in args.principal or []] or [None]
            resources = resources_of(args, pattern)
            for principal in principals:
                if resources:
                    _list(tool, resources, principal)
                else:
                    print_resources(tool.describe(ResourceType.ANY, None, PatternType.ANY, principal))
        return 0
    except ToolError as exc:
        print(f"pybroker acls: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if tool is not None:
            tool.close()


def _list(tool: AclsTool, resources: list[Resource], principal: str | None) -> None:
    for resource in resources:
        found = tool.describe(resource.type, resource.name, resource.pattern, principal)
        print_resources(found or {resource: []})


def _confirmed(filters) -> bool:
    resources = ", ".join(dict.fromkeys(f"`{r.text()}`" for r, _ in filters))
    print(f"Are you sure you want to remove ACLs from {resources}? (y/n)", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def register(commands) -> None:
    acls = commands.add_parser(
        "acls",
        help="add, remove or list ACLs (like kafka-acls.sh)",
        description="Manages the ACLs of a broker with an authorizer (authorizer.class.name). --add makes one ACL "
        "per resource, principal, host and operation (hosts default to *, operations to All); --producer and "
        "--consumer stand for Kafka's usual sets. --remove deletes those ACLs, or every ACL of the named resources "
        "when no principal is given, after a y on stdin unless --force. --list prints the ACLs of the named "
        "resources, or all. " + EXIT_CODES,
    )
    add_client_options(acls)
    action = acls.add_argument_group("action")
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    acls.add_argument("--topic", action="append", metavar="TOPIC", help="a topic (repeatable; * for every topic)")
    acls.add_argument("--group", action="append", metavar="GROUP", help="a consumer group (repeatable)")
    acls.add_argument("--transactional-id", action="append", metavar="ID", help="a transactional id (repeatable)")
    acls.add_argument("--cluster", action="store_true", help="the cluster")
    acls.add_argument(
        "--resource-pattern-type", default="literal", metavar="TYPE",
        help="literal (default) or prefixed; for --list and --remove also any or match",
    )
    acls.add_argument("--allow-principal", action="append", metavar="TYPE:NAME", help="e.g. User:alice (repeatable)")
    acls.add_argument("--deny-principal", action="append", metavar="TYPE:NAME", help="(repeatable)")
    acls.add_argument("--allow-host", action="append", metavar="HOST", help="hosts of --allow-principal (default *)")
    acls.add_argument("--deny-host", action="append", metavar="HOST", help="hosts of --deny-principal (default *)")
    acls.add_argument(
        "--operation", action="append", metavar="OPERATION",
        help="All (default), Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        "AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens (repeatable)",
    )
    acls.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics (and more, see above)")
    acls.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics and READ on the groups")
    acls.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    acls.add_argument("--principal", action="append", metavar="TYPE:NAME", help="with --list: only these principals")
    acls.add_argument("--force", action="store_true", help="with --remove: do not ask")
    acls.set_defaults(func=cmd_acls)
