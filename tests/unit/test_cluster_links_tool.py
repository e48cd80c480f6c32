"""``pybroker cluster-links`` / ``pybroker mirrors`` pieces that need no broker: the
``--config`` parser and the join of DescribeMirrors answers from several brokers
(answers built as a broker declares them in protocol/messages/cluster_links.py)."""

from __future__ import annotations

import pytest

from broker.tools.client import ToolError
from broker.tools.cluster_links import join_mirror_answers, mirror_json, mirror_lines, parse_config_items
from controller.metadata.records import MIRROR_ACTIVE, MIRROR_PROMOTED
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_DM = struct_classes(APIS_BY_NAME["DescribeMirrors"].response)


def test_config_items_keep_commas_inside_values():
    assert parse_config_items("bootstrap.servers=a:1,b:2,security.protocol=SSL") == {
        "bootstrap.servers": "a:1,b:2", "security.protocol": "SSL",
    }
    assert parse_config_items(None) == {}
    with pytest.raises(ToolError):
        parse_config_items("a:1")


def partition(index, leader, *, error=ErrorCode.NONE, leo=-1, hw=-1, source_hw=-1, lag=-1, stop=-1):
    return _DM.DescribedMirrorPartition(
        partition_index=index, leader_id=leader, error_code=error, error_message=None,
        local_log_end_offset=leo, local_high_watermark=hw, source_high_watermark=source_hw,
        lag_records=lag, lag_ms=0 if lag == 0 else 1500, last_fetch_ms=1700000000000, stop_offset=stop,
    )


def answer(*partitions, state=MIRROR_ACTIVE, topic="orders"):
    return _DM.DescribeMirrorsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=[
        _DM.DescribedMirror(mirror_topic=topic, error_code=ErrorCode.NONE, link_name="east", source_topic=topic,
                            state=state, reason=None, partitions=list(partitions)),
    ])


def test_each_partition_is_taken_from_the_broker_that_leads_it():
    views = join_mirror_answers({
        # Broker 1 leads partition 0; it also says what it knows of partition 1 (led by 2).
        1: answer(partition(0, 1, leo=10, hw=10, source_hw=12, lag=2), partition(1, 2, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)),
        2: answer(partition(1, 2, leo=7, hw=7, source_hw=7, lag=0)),
    })
    view = views["orders"]
    assert (view.link, view.state) == ("east", "ACTIVE")
    assert {p: (v.leader_id, v.lag_records) for p, v in view.partitions.items()} == {0: (1, 2), 1: (2, 0)}
    described = mirror_json(view)
    assert [p["source_high_watermark"] for p in described["partitions"]] == [12, 7]
    assert described["partitions"][1]["error"] is None
    assert "LagRecords: 2" in mirror_lines(view)[1]


def test_stop_offsets_of_a_promoted_mirror():
    views = join_mirror_answers({3: answer(partition(0, 3, stop=40), partition(1, 3, stop=0), state=MIRROR_PROMOTED)})
    view = views["orders"]
    assert view.state == "PROMOTED"
    assert [p["stop_offset"] for p in mirror_json(view)["partitions"]] == [40, 0]


def test_a_broker_error_is_kept_not_hidden():
    failing = _DM.DescribeMirrorsResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    views = join_mirror_answers({2: answer(partition(0, 2, lag=0)), 1: failing})
    assert views["orders"].errors == ["broker 1: CLUSTER_AUTHORIZATION_FAILED"]
