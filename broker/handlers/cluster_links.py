"""Cluster links and mirror topics: pybroker's own admin APIs 16000-16005 and the
brokers' reports 16007-16008 (protocol/messages/cluster_links.py).

CreateClusterLinks, DeleteClusterLinks, AlterClusterLinks, CreateMirrorTopics
and AlterMirrors change metadata: a broker forwards them to the active
controller (broker/controller_node/forwarding.py), which plans them with
controller/link_commands.py. DescribeClusterLinks is answered from this
node's image, secrets as null values.

CreateMirrorTopics asks the source first (where the request is handled, on
the active controller): Metadata for the partition count and DescribeConfigs
for the topic's own configs, through the link's client settings, bounded by
the request's ``timeout_ms``. A source that cannot be reached is
NETWORK_EXCEPTION (REQUEST_TIMED_OUT when it did not answer in time), a link
setting the client cannot use INVALID_CONFIG, a missing source topic
UNKNOWN_TOPIC_OR_PARTITION, each with a message saying which.

CreateMirrorTopics with ``failback`` (broker/links/failback.py) asks the
source's brokers for the stopped mirror's marks (DescribeMirrors) and this
cluster's partition leaders for their log ends, answers the report per
partition in ``failback_partitions`` and, unless ``validate_only``, has the
controller make the topic a mirror again (``plan_failback``). A refusal
(the source's topic is not a stopped mirror, partition counts differ, a
leader does not answer) names its reason.

CreateClusterLinks and AlterClusterLinks (``validate_only`` too) are checked
by the broker the client asked, before they are forwarded: a link whose
client settings cannot be used to reach the source (a TLS file missing or not
PEM, SASL without usable credentials, a mechanism pybroker does not speak:
``link_client_security`` in broker/links/source.py) is refused there with
INVALID_CONFIG naming the key, and nothing is stored. For an alteration, the
link's settings in this node's image with the changes applied as the
controller applies them are what is checked. Anything the controller refuses
itself (names, unknown keys, values) is left to its answer.

Authorization, decided by the broker the client asked (as for CreateTopics):
the link APIs need ALTER on the cluster (DescribeClusterLinks DESCRIBE),
CreateMirrorTopics CREATE on the cluster or on each topic (else
TOPIC_AUTHORIZATION_FAILED for it), AlterMirrors ALTER on each topic.
MirrorPartitionsStopped and UpdateMirrorTopic come from brokers over the
controller listener and need CLUSTER_ACTION there.
"""

from __future__ import annotations

import asyncio
import logging

from broker.links.failback import FailbackRefused, failback_report, local_log_ends, read_stop_marks
from broker.links.source import SourceCluster, SourceConfigError, SourceUnavailable, link_settings_error
from broker.links.source_topic import SourceTopicMissing, describe_source_topic
from broker.security.authorization import (
    TOPIC,
    Partial,
    cluster_allowed,
    cluster_refusal,
    denied,
    refill,
    refuse_whole,
    split_entries,
    with_fields,
)
from controller.authorizer import AclOperation
from controller.link_commands import (
    FailbackSpec,
    LinkSettingsRefused,
    MirrorResult,
    MirrorSpec,
    altered_link_configs,
    describe_links,
    failback_error,
    link_name_error,
    mirror_request_error,
    new_link_configs,
    plan_alter_links,
    plan_alter_mirrors,
    plan_create_links,
    plan_create_mirrors,
    plan_delete_links,
    plan_failback,
    plan_mirror_partitions_stopped,
    plan_update_mirror_topic,
)
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import ZERO_UUID, struct_classes

log = logging.getLogger(__name__)

CREATE = APIS_BY_NAME["CreateClusterLinks"]
DESCRIBE = APIS_BY_NAME["DescribeClusterLinks"]
DELETE = APIS_BY_NAME["DeleteClusterLinks"]
ALTER = APIS_BY_NAME["AlterClusterLinks"]
CREATE_MIRRORS = APIS_BY_NAME["CreateMirrorTopics"]
ALTER_MIRRORS = APIS_BY_NAME["AlterMirrors"]
STOPPED = APIS_BY_NAME["MirrorPartitionsStopped"]
UPDATE = APIS_BY_NAME["UpdateMirrorTopic"]
# The admin APIs a broker forwards to the active controller.
FORWARDED_LINK_API_KEYS = frozenset({CREATE.key, DELETE.key, ALTER.key, CREATE_MIRRORS.key, ALTER_MIRRORS.key})
_C = struct_classes(CREATE.response)
_D = struct_classes(DESCRIBE.response)
_X = struct_classes(DELETE.response)
_A = struct_classes(ALTER.response)
_CM = struct_classes(CREATE_MIRRORS.response)
_AM = struct_classes(ALTER_MIRRORS.response)
_S = struct_classes(STOPPED.response)
_U = struct_classes(UPDATE.response)
_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
AUTHORIZATION_FAILED = "Authorization failed."


def _create_links_answer(request, code, message):
    return _C.CreateClusterLinksResponse(throttle_time_ms=0, results=[
        _C.CreatableLinkResult(link_name=l.link_name, link_id=ZERO_UUID, error_code=code, error_message=message)
        for l in request.links
    ])


def _delete_links_answer(request, code, message):
    return _X.DeleteClusterLinksResponse(throttle_time_ms=0, results=[
        _X.DeletedLinkResult(link_name=name, error_code=code, error_message=message) for name in request.link_names
    ])


def _alter_links_answer(request, code, message):
    return _A.AlterClusterLinksResponse(throttle_time_ms=0, results=[
        _A.AlterableLinkResult(link_name=l.link_name, error_code=code, error_message=message) for l in request.links
    ])


def _mirror_result(topic: str, code, message=None, topic_id=ZERO_UUID, num_partitions=-1, report=()):
    return _CM.CreatableMirrorResult(
        mirror_topic=topic, topic_id=topic_id, num_partitions=num_partitions, error_code=code, error_message=message,
        failback_partitions=[
            _CM.FailbackPartition(
                partition_index=row.partition, stop_offset=row.stop_offset, stop_epoch=row.stop_epoch,
                log_end_offset=row.log_end_offset, records_removed=row.records_removed,
            )
            for row in report
        ],
    )


async def _failback(broker, controller, t, timeout_ms: int, validate_only: bool):
    """One failback entry of CreateMirrorTopics: its CreatableMirrorResult."""
    source_topic = t.source_topic or t.mirror_topic
    problem = failback_error(broker.image, t.mirror_topic, t.link_name)
    if problem is not None:
        return _mirror_result(t.mirror_topic, *problem)
    link = broker.image.cluster_links[t.link_name]
    source = None
    try:
        source = SourceCluster(t.link_name, link.configs, client_id=f"pybroker-link-{t.link_name}-{broker.node_id}")
        async with asyncio.timeout(max(timeout_ms, 1) / 1000):
            marks = await read_stop_marks(source, source_topic, timeout_ms)
            if len(marks) != len(broker.image.topics[t.mirror_topic].partitions):
                raise FailbackRefused(
                    f"{t.mirror_topic} has {len(broker.image.topics[t.mirror_topic].partitions)} partitions here and "
                    f"{source_topic} has {len(marks)} on the source of link {t.link_name}: failback needs the same partitions"
                )
            ends = await local_log_ends(broker, t.mirror_topic, timeout_ms)
    except SourceConfigError as exc:
        return _mirror_result(t.mirror_topic, ErrorCode.INVALID_CONFIG, f"cluster link {t.link_name}: {exc}")
    except FailbackRefused as exc:
        return _mirror_result(t.mirror_topic, exc.error_code, str(exc))
    except TimeoutError:
        return _mirror_result(
            t.mirror_topic, ErrorCode.REQUEST_TIMED_OUT, f"failback of {t.mirror_topic} did not finish within {timeout_ms} ms"
        )
    except (SourceUnavailable, ConnectionError, OSError) as exc:
        return _mirror_result(
            t.mirror_topic, ErrorCode.NETWORK_EXCEPTION, f"cannot reach the source cluster of link {t.link_name}: {exc}"
        )
    finally:
        if source is not None:
            source.close()
    report = failback_report(marks, ends)
    spec = FailbackSpec(t.mirror_topic, t.link_name, source_topic, marks)
    if validate_only:
        result, _ = plan_failback(broker.image, spec)
    else:
        result = await controller.link_command(
            lambda image, defaults, new_uuid: plan_failback(image, spec),
            lambda m: MirrorResult(t.mirror_topic, ErrorCode.NOT_CONTROLLER, m),
        )
    if result.error_code == ErrorCode.NONE and not validate_only:
        log.info(
            "cluster links: failback of %s from %s over link %s: %d records of this cluster's own removed",
            t.mirror_topic, source_topic, t.link_name, sum(row.records_removed for row in report),
        )
    return _mirror_result(
        result.mirror_topic, result.error_code, result.error_message, result.topic_id, result.num_partitions,
        report if result.error_code == ErrorCode.NONE else (),
    )


def _alter_mirrors_answer(request, code, message):
    return _AM.AlterMirrorsResponse(throttle_time_ms=0, results=[
        _AM.AlterMirrorResult(mirror_topic=t, error_code=code, error_message=message) for t in request.topics
    ])


def _stopped_answer(code, message):
    return _S.MirrorPartitionsStoppedResponse(throttle_time_ms=0, error_code=code, error_message=message)


def _update_answer(code, message):
    return _U.UpdateMirrorTopicResponse(throttle_time_ms=0, error_code=code, error_message=message)


def _needs_cluster(broker, operation: int, answer, settings_check=None):
    """The pre-forwarding hook: ``operation`` on the cluster, then, when given,
    ``settings_check(request)`` (a Partial, or None when every entry passes)."""

    def authorize(ctx, request):
        message = cluster_refusal(broker, ctx, operation)
        if message is not None:
            return refuse_whole(lambda: answer(request, _DENIED, message))
        return None if settings_check is None else settings_check(request)

    return authorize


def _unusable_new_link(image, link, counts: dict[str, int]) -> str | None:
    """Why a CreateClusterLinks entry's client settings cannot be used here, naming
    the key; None when they can, or when the controller refuses the entry for
    another reason first (its name, settings it checks itself), whose answer
    the client then gets unchanged."""
    if link_name_error(link.link_name) or counts[link.link_name] > 1 or link.link_name in image.cluster_links:
        return None
    try:
        configs = new_link_configs(link.configs)
    except LinkSettingsRefused:
        return None
    return link_settings_error(link.link_name, configs)


def _unusable_altered_link(image, altered) -> str | None:
    """Why a link's settings once an AlterClusterLinks entry applies to them (as
    the controller applies it, to this node's image) cannot be used here; None
    as for :func:`_unusable_new_link`."""
    link = image.cluster_links.get(altered.link_name)
    if link is None:
        return None
    try:
        configs = altered_link_configs(link.configs, altered.configs)
    except LinkSettingsRefused:
        return None
    return link_settings_error(altered.link_name, configs)


def _check_new_links(broker, request):
    counts: dict[str, int] = {}
    for link in request.links:
        counts[link.link_name] = counts.get(link.link_name, 0) + 1
    image = broker.image

    def refusal(link):
        message = _unusable_new_link(image, link, counts)
        if message is None:
            return None
        return _C.CreatableLinkResult(
            link_name=link.link_name, link_id=ZERO_UUID, error_code=ErrorCode.INVALID_CONFIG, error_message=message
        )

    return split_entries(
        request, "links", refusal, "results", lambda: _C.CreateClusterLinksResponse(throttle_time_ms=0, results=[])
    )


def _check_altered_links(broker, request):
    image = broker.image

    def refusal(altered):
        message = _unusable_altered_link(image, altered)
        if message is None:
            return None
        return _A.AlterableLinkResult(
            link_name=altered.link_name, error_code=ErrorCode.INVALID_CONFIG, error_message=message
        )

    return split_entries(
        request, "links", refusal, "results", lambda: _A.AlterClusterLinksResponse(throttle_time_ms=0, results=[])
    )


async def _read_sources(broker, request) -> tuple[list[MirrorSpec], dict[int, MirrorResult]]:
    """Ask each link's source about its topics. Returns the specs to plan and,
    by request position, the results already decided (errors)."""
    image = broker.image
    specs: list[MirrorSpec] = []
    decided: dict[int, MirrorResult] = {}
    sources: dict[str, SourceCluster] = {}
    timeout_s = max(request.timeout_ms, 1) / 1000
    try:
        for i, t in enumerate(request.topics):
            configs = {c.name: c.value for c in t.configs}
            source_topic = t.source_topic or t.mirror_topic
            problem = mirror_request_error(image, t.mirror_topic, t.link_name, configs)
            if problem is not None:
                decided[i] = MirrorResult(t.mirror_topic, *problem)
                continue
            source = sources.get(t.link_name)
            try:
                if source is None:
                    link = image.cluster_links[t.link_name]
                    source = SourceCluster(
                        t.link_name, link.configs, client_id=f"pybroker-link-{t.link_name}-{broker.node_id}"
                    )
                    sources[t.link_name] = source
                found = await asyncio.wait_for(describe_source_topic(source, source_topic), timeout_s)
            except SourceConfigError as exc:
                decided[i] = MirrorResult(t.mirror_topic, ErrorCode.INVALID_CONFIG, f"cluster link {t.link_name}: {exc}")
                continue
            except SourceTopicMissing as exc:
                decided[i] = MirrorResult(t.mirror_topic, exc.error_code, str(exc))
                continue
            except TimeoutError:
                decided[i] = MirrorResult(
                    t.mirror_topic, ErrorCode.REQUEST_TIMED_OUT,
                    f"the source cluster of link {t.link_name} did not answer within {request.timeout_ms} ms",
                )
                continue
            except (SourceUnavailable, ConnectionError, OSError) as exc:
                decided[i] = MirrorResult(
                    t.mirror_topic, ErrorCode.NETWORK_EXCEPTION,
                    f"cannot reach the source cluster of link {t.link_name}: {exc}",
                )
                continue
            specs.append(MirrorSpec(
                mirror_topic=t.mirror_topic, link_name=t.link_name, source_topic=source_topic,
                replication_factor=t.replication_factor, configs=configs,
                source_partitions=found.partitions, source_configs=found.configs,
            ))
    finally:
        for source in sources.values():
            source.close()
    return specs, decided


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    """``forwarded``: the controller listener, which serves what brokers forward and send."""
    controller = broker.controller

    async def create_links(ctx, request):
        def plan(image, defaults, new_uuid):
            return plan_create_links(image, request, new_uuid)

        return await controller.link_command(plan, lambda m: _create_links_answer(request, ErrorCode.NOT_CONTROLLER, m))

    async def delete_links(ctx, request):
        return await controller.link_command(
            lambda image, defaults, new_uuid: plan_delete_links(image, request),
            lambda m: _delete_links_answer(request, ErrorCode.NOT_CONTROLLER, m),
        )

    async def alter_links(ctx, request):
        return await controller.link_command(
            lambda image, defaults, new_uuid: plan_alter_links(image, request),
            lambda m: _alter_links_answer(request, ErrorCode.NOT_CONTROLLER, m),
        )

    def describe(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.DESCRIBE)
        if message is not None:
            return _D.DescribeClusterLinksResponse(throttle_time_ms=0, error_code=_DENIED, error_message=message, results=[])
        return describe_links(broker.image, request)

    async def create_mirrors(ctx, request):
        if not controller.is_active:
            # Asking the source is pointless when the controller cannot act here.
            return _CM.CreateMirrorTopicsResponse(throttle_time_ms=0, results=[
                _mirror_result(t.mirror_topic, ErrorCode.NOT_CONTROLLER, "this node is not the active controller")
                for t in request.topics
            ])
        failbacks = {}
        for i, t in enumerate(request.topics):
            if t.failback:
                failbacks[i] = await _failback(broker, controller, t, request.timeout_ms, request.validate_only)
        if failbacks:
            request = with_fields(request, topics=[t for t in request.topics if not t.failback])
        specs, decided = await _read_sources(broker, request) if request.topics else ([], {})

        def plan(image, defaults, new_uuid):
            return plan_create_mirrors(image, specs, defaults, new_uuid, validate_only=request.validate_only)

        planned = await controller.link_command(
            plan, lambda m: [MirrorResult(s.mirror_topic, ErrorCode.NOT_CONTROLLER, m) for s in specs]
        )
        by_name = {r.mirror_topic: r for r in planned}
        results = list(failbacks.values())
        for i, t in enumerate(request.topics):
            r = decided.get(i) or by_name.get(t.mirror_topic)
            if r is None:
                continue  # a duplicated name, answered once
            results.append(_mirror_result(r.mirror_topic, r.error_code, r.error_message, r.topic_id, r.num_partitions))
            if r.error_code == ErrorCode.NONE and not request.validate_only:
                log.info("cluster links: created mirror topic %s of %s over link %s", t.mirror_topic,
                         t.source_topic or t.mirror_topic, t.link_name)
        return _CM.CreateMirrorTopicsResponse(throttle_time_ms=0, results=results)

    def authorize_create_mirrors(ctx, request):
        if broker.authorizer is None or cluster_allowed(broker, ctx, AclOperation.CREATE):
            return None
        refused = denied(broker, ctx, AclOperation.CREATE, TOPIC, [t.mirror_topic for t in request.topics])
        if not refused:
            return None
        return split_entries(
            request, "topics",
            lambda t: _mirror_result(t.mirror_topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED, AUTHORIZATION_FAILED)
            if t.mirror_topic in refused else None,
            "results", lambda: _CM.CreateMirrorTopicsResponse(throttle_time_ms=0, results=[]),
        )

    async def alter_mirrors(ctx, request):
        return await controller.link_command(
            lambda image, defaults, new_uuid: plan_alter_mirrors(image, request),
            lambda m: _alter_mirrors_answer(request, ErrorCode.NOT_CONTROLLER, m),
        )

    def authorize_alter_mirrors(ctx, request):
        refused = denied(broker, ctx, AclOperation.ALTER, TOPIC, request.topics)
        if not refused:
            return None
        refused_entries = [
            _AM.AlterMirrorResult(mirror_topic=t, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED)
            if t in refused else None
            for t in request.topics
        ]
        kept = [t for t in request.topics if t not in refused]
        def answer(response):
            answered = [] if response is None else response.results
            return _AM.AlterMirrorsResponse(
                throttle_time_ms=0,
                results=refill([r is None for r in refused_entries], [r for r in refused_entries if r is not None], answered),
            )

        return Partial(with_fields(request, topics=kept) if kept else None, answer)

    # The broker the client asked checks that a link's client settings can be
    # used (files readable, SASL complete) before the request goes on; what
    # reaches the controller listener was forwarded, so checked there already.
    check_new = None if forwarded else lambda request: _check_new_links(broker, request)
    check_altered = None if forwarded else lambda request: _check_altered_links(broker, request)
    create_hook = _needs_cluster(broker, AclOperation.ALTER, _create_links_answer, check_new)
    alter_hook = _needs_cluster(broker, AclOperation.ALTER, _alter_links_answer, check_altered)
    dispatcher.register(CREATE.key, 0, 0, create_links, authorize=create_hook)
    dispatcher.register(DELETE.key, 0, 0, delete_links, authorize=_needs_cluster(broker, AclOperation.ALTER, _delete_links_answer))
    dispatcher.register(ALTER.key, 0, 0, alter_links, authorize=alter_hook)
    dispatcher.register(CREATE_MIRRORS.key, 0, 0, create_mirrors, authorize=authorize_create_mirrors)
    dispatcher.register(ALTER_MIRRORS.key, 0, 0, alter_mirrors, authorize=authorize_alter_mirrors)
    if not forwarded:
        dispatcher.register(DESCRIBE.key, 0, 0, describe)
        return

    async def partitions_stopped(ctx, request):
        return await controller.mirror_report(
            STOPPED, request, lambda image, r, defaults: plan_mirror_partitions_stopped(image, r, controller.origin_id),
            lambda m: _stopped_answer(ErrorCode.NOT_CONTROLLER, m),
        )

    async def update_mirror(ctx, request):
        return await controller.mirror_report(
            UPDATE, request, plan_update_mirror_topic, lambda m: _update_answer(ErrorCode.NOT_CONTROLLER, m),
        )

    def needs_cluster_action(answer):
        def authorize(ctx, request):
            if cluster_allowed(broker, ctx, AclOperation.CLUSTER_ACTION):
                return None
            return refuse_whole(lambda: answer(_DENIED, f"{ctx.principal} may not CLUSTER_ACTION the cluster"))

        return authorize

    dispatcher.register(STOPPED.key, 0, 0, partitions_stopped, authorize=needs_cluster_action(_stopped_answer))
    dispatcher.register(UPDATE.key, 0, 0, update_mirror, authorize=needs_cluster_action(_update_answer))
