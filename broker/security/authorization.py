"""The request handlers' questions to the broker's authorizer.

``broker.authorizer`` is None without ``authorizer.class.name``: then every
question here answers "allowed" (and the authorized-operations fields keep the
answers of broker/security/authorized_operations.py), so a broker without an authorizer
pays one attribute test per check. With one (controller/authorizer.py, which
follows the metadata image), the request's principal and peer host, as the
connection gave them to ``RequestContext``, are asked about, as Kafka's
AuthHelper does.

Most handlers ask inside their handler. The APIs a broker forwards to the
active controller cannot: the controller only sees the forwarding node's
principal. They (and some per-entry APIs that find it convenient) register a
pre-authorization hook with the dispatcher instead (``Dispatcher.register``'s
``authorize``), which runs before the request is forwarded or handled and
answers a :class:`Partial`: the part of the request the caller may do, and how
to make the client's answer from the response to that part
(:func:`split_entries` for the usual "refuse some entries, merge them back in
request order", :func:`refuse_whole` for a request refused as a whole).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.authorizer import CLUSTER_NAME, AclOperation, ResourceType, operations_bitfield
from controller.config_commands import RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP
from controller.metadata.records import RESOURCE_BROKER, RESOURCE_TOPIC
from protocol.errors import ErrorCode

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def allowed(broker, ctx, operation: int, resource_type: int, name: str) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.host, operation, resource_type, name)


def cluster_allowed(broker, ctx, operation: int) -> bool:
    return allowed(broker, ctx, operation, CLUSTER, CLUSTER_NAME)


def denied(broker, ctx, operation: int, resource_type: int, names) -> set[str]:
    """The names among ``names`` (any iterable, not read without an authorizer) the caller
    may not ``operation``, each asked once."""
    authorizer = broker.authorizer
    if authorizer is None:
        return set()
    return {
        name
        for name in set(names)
        if not authorizer.authorize(ctx.principal, ctx.host, operation, resource_type, name)
    }


def operations(broker, ctx, resource_type: int, name: str, without_authorizer: int) -> int:
    """The authorized_operations int32 of a response field: ``without_authorizer`` (every
    operation of the type, as broker/security/authorized_operations.py gives it) when there is no
    authorizer, else what the caller may do."""
    authorizer = broker.authorizer
    if authorizer is None:
        return without_authorizer
    return operations_bitfield(authorizer.authorized_operations(ctx.principal, ctx.host, resource_type, name))


# Kafka's default messages of the authorization errors (Errors.java), for answers that carry one.
MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}


@dataclass(frozen=True, slots=True)
class Partial:
    """What an API's pre-authorization hook decided about one request (see ``Dispatcher.register``).

    ``request`` is the part the caller may do, the one the dispatcher sends on
    to the active controller or gives the local handler; None when nothing is
    left (then nothing is sent and no handler runs). ``answer`` turns the
    response to that part (None when nothing was sent) into the client's
    answer: the refused entries merged back, the request-wide refusal, or
    fields the caller may not see removed."""

    request: Any
    answer: Callable[[Any], Any]


def with_fields(value, **changes):
    """A copy of a decoded request or response struct with ``changes`` applied."""
    fields = {name: getattr(value, name) for name in type(value).__slots__}
    fields.update(changes)
    return type(value)(**fields)


def refill(kept: list[bool], refused: list, answered: list) -> list:
    """Entries in the request's order: position i is the next of ``refused`` where ``kept[i]`` is
    false, else the next of ``answered`` (skipped when those ran out, as when the handler answered
    two copies of a name once); answered entries left over go last, so none is lost."""
    refused_entries, answered_entries = iter(refused), iter(answered)
    out = []
    for keep in kept:
        if not keep:
            out.append(next(refused_entries))
            continue
        entry = next(answered_entries, None)
        if entry is not None:
            out.append(entry)
    out.extend(answered_entries)
    return out


def split_entries(request, field: str, refusal: Callable[[Any], Any], response_field: str, empty: Callable[[], Any], finish=None):
    """The usual per-entry hook: ``refusal(entry)`` gives the response entry of a refused request
    entry (None: allowed). The allowed entries are sent on; the answer has the refused ones back
    in their places, each allowed entry passed through ``finish`` when given. None (no change at
    all) when nothing is refused and there is no ``finish``."""
    entries = getattr(request, field)
    refused = [refusal(entry) for entry in entries]
    kept = [r is None for r in refused]
    if all(kept) and finish is None:
        return None
    denied = [r for r in refused if r is not None]
    allowed = [entry for entry, keep in zip(entries, kept) if keep]

    def answer(response):
        if response is None:
            response = empty()
        answered = getattr(response, response_field)
        if finish is not None:
            answered = [finish(entry) for entry in answered]
        return with_fields(response, **{response_field: refill(kept, denied, answered)})

    return Partial(with_fields(request, **{field: allowed}) if allowed else None, answer)


def refuse_whole(build: Callable[[], Any]) -> Partial:
    """A request refused as a whole: nothing is sent, ``build()`` is the answer."""
    return Partial(None, lambda _response: build())


def config_refusal(broker, ctx, operation: int, resource_type: int, name: str) -> ErrorCode | None:
    """The error of a config resource the caller may not ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS), None when allowed or not a type Kafka checks (the handler refuses those):
    a topic on the topic, a group on the group, the broker types on the cluster (Kafka's
    ConfigHelper and ControllerApis.authorizeAlterResource)."""
    if broker.authorizer is None:
        return None
    if resource_type == RESOURCE_TOPIC:
        return None if allowed(broker, ctx, operation, TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == RESOURCE_GROUP:
        return None if allowed(broker, ctx, operation, GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        return None if cluster_allowed(broker, ctx, operation) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def cluster_refusal(broker, ctx, operation: int) -> str | None:
    """The message of a request refused for want of ``operation`` on the cluster (its error is
    CLUSTER_AUTHORIZATION_FAILED), None when allowed."""
    if cluster_allowed(broker, ctx, operation):
        return None
    return f"{ctx.principal} may not {AclOperation(operation).name} the cluster"
