"""DescribeMultiMasterCopies (key 16009, pybroker's own), version 0.

Every broker answers for the multi-master partitions it leads and copies in
from a link's source (broker/links/multi_master.py), as DescribeMirrors does
for mirror partitions: a tool asks each broker and joins the answers. Per
copy: whether it stopped on a sequence gap and why (or the last round's
passing problem), the source position and high watermark, the lag in records
and milliseconds, the time of the source's last answer, and the batches
copied and skipped. ``links`` null: every link. A copy of a topic the caller
may not DESCRIBE is left out, as Metadata leaves such topics out.
"""

from __future__ import annotations

import time

from broker.security.authorization import TOPIC, allowed
from controller.authorizer import AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeMultiMasterCopies"]
R = struct_classes(API.response)


def copies(broker, ctx, links: list[str] | None, now_ms: int) -> list:
    wanted = None if links is None else set(links)
    rows = []
    for (link, topic, partition), copy in sorted(broker.multi_master.partitions.items()):
        if wanted is not None and link not in wanted:
            continue
        if not allowed(broker, ctx, AclOperation.DESCRIBE, TOPIC, topic):
            continue
        rows.append(
            R.MultiMasterCopy(
                link_name=link,
                topic=topic,
                partition_index=partition,
                leader_id=broker.node_id,
                stopped=copy.error is not None,
                error_message=copy.error or copy.problem,
                source_position=copy.position,
                source_high_watermark=copy.source_high_watermark,
                lag_records=copy.lag_records(),
                lag_ms=copy.lag_ms(now_ms),
                last_fetch_ms=copy.last_fetch_ms,
                copied_batches=copy.copied_batches,
                skipped_batches=sum(copy.skipped_batches.values()),
            )
        )
    return rows


def register(dispatcher, broker) -> None:
    def handle(ctx, request):
        rows = copies(broker, ctx, request.links, int(time.time() * 1000))
        return R.DescribeMultiMasterCopiesResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, copies=rows)

    dispatcher.register(API.key, 0, 0, handle)
