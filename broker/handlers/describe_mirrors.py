"""DescribeMirrors (key 16006, pybroker's own), version 0.

Every broker answers for the mirror partitions it leads, as for
DescribeLogDirs: a tool asks each broker and joins the answers. Per mirror
topic (every one when ``topics`` is null) the topic-level fields come from
the metadata image: the link's name, the source topic, the state and its
reason. Per partition led here: the local log end and high watermark; while
the mirror fetcher copies it (broker/links/mirror_fetcher.py), the source's
high watermark from its last answer, the lag in records and milliseconds,
the wall-clock time of that answer and the last error with its message (a
source that does not answer, a missing source topic, a divergence);
``stop_offset`` is where a stopped mirror stopped (the controller's mark),
``stop_epoch`` the leader epoch of the batch before it (a failback's cut
point on the old source: broker/links/failback.py).

Errors: a named topic that is not a mirror answers RESOURCE_NOT_FOUND (an
unknown one UNKNOWN_TOPIC_OR_PARTITION). With an authorizer, a named topic
the caller may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED; with a null
list such topics are left out, as Metadata leaves them out.
"""

from __future__ import annotations

import time

from broker.security.authorization import TOPIC, allowed
from controller.authorizer import AclOperation
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_FAILOVER, MIRROR_PENDING_PROMOTE
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeMirrors"]
R = struct_classes(API.response)
# States whose marks are not where the mirror stopped (an active mirror's mark is a failback's cut-back point).
_COPYING_STATES = frozenset({MIRROR_ACTIVE, MIRROR_PAUSED, MIRROR_PENDING_PROMOTE, MIRROR_PENDING_FAILOVER})


def _empty_topic(name: str, error: ErrorCode):
    return R.DescribedMirror(
        mirror_topic=name, error_code=error, link_name="", source_topic="", state=-1, reason=None, partitions=[]
    )


def describe_topic(broker, name: str, mirror, now_ms: int):
    image = broker.image
    topic = image.topics.get(name)
    link = image.link_by_id(mirror.link_id)
    partitions = []
    for partition in sorted(topic.partitions.values(), key=lambda p: p.partition_id):
        if partition.leader != broker.node_id:
            continue
        key = (name, partition.partition_id)
        mark = mirror.partition_marks.get(partition.partition_id)
        answer = R.DescribedMirrorPartition(
            partition_index=partition.partition_id,
            leader_id=partition.leader,
            error_code=ErrorCode.NONE,
            error_message=None,
            stop_offset=mark[0] if mark is not None and mirror.state not in _COPYING_STATES else -1,
            stop_epoch=mark[1] if mark is not None and mirror.state not in _COPYING_STATES else -1,
        )
        plog = broker.partition_log(*key)
        if plog is not None:
            answer.local_log_end_offset = plog.log_end_offset
            answer.local_high_watermark = plog.high_watermark
        found = broker.mirrors.status(key)
        if found is not None and plog is not None:
            core, link_error = found
            answer.source_high_watermark = core.source_high_watermark
            answer.lag_records = core.lag_records(plog.log_end_offset)
            answer.lag_ms = core.lag_ms(plog.log_end_offset, now_ms)
            answer.last_fetch_ms = core.last_fetch_ms
            if core.failure:
                answer.error_code, answer.error_message = core.error, core.failure
            elif link_error:
                answer.error_code, answer.error_message = ErrorCode.INVALID_CONFIG, link_error
            elif core.error != ErrorCode.NONE:
                answer.error_code, answer.error_message = core.error, core.error_message
        partitions.append(answer)
    return R.DescribedMirror(
        mirror_topic=name,
        error_code=ErrorCode.NONE,
        link_name=link.name if link is not None else "",
        source_topic=mirror.source_topic,
        state=mirror.state,
        reason=mirror.reason,
        partitions=partitions,
    )


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        image = broker.image
        now_ms = int(time.time() * 1000)
        topics = []
        if request.topics is None:
            names = sorted(
                name
                for name in (image.topic_names_by_id.get(topic_id) for topic_id in image.mirror_topics)
                if name is not None
            )
            for name in names:
                if allowed(broker, ctx, AclOperation.DESCRIBE, TOPIC, name):
                    topics.append(describe_topic(broker, name, image.mirror_of(name), now_ms))
        else:
            for name in dict.fromkeys(request.topics):
                if not allowed(broker, ctx, AclOperation.DESCRIBE, TOPIC, name):
                    topics.append(_empty_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                elif name not in image.topics:
                    topics.append(_empty_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                elif (mirror := image.mirror_of(name)) is None:
                    topics.append(_empty_topic(name, ErrorCode.RESOURCE_NOT_FOUND))
                else:
                    topics.append(describe_topic(broker, name, mirror, now_ms))
        return R.DescribeMirrorsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=topics)

    dispatcher.register(API.key, 0, 0, handle)
