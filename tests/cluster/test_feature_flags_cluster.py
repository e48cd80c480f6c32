"""Feature flags on three combined nodes: the first active controller
finalizes a new cluster's levels once, an UpdateFeatures sent to a node that is
not the active controller is forwarded there, and every broker then reports
the same finalized levels in ApiVersions and serves (or refuses) the consumer
protocol by them."""

from __future__ import annotations

import pytest

from controller.features import GROUP_VERSION, default_feature_levels
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from tests.cluster.replication_harness import NODE_IDS, ReplicatedCluster, wait_until
from tests.interop._support import RawConnection

BOUND_S = 30.0
API_VERSIONS = APIS_BY_NAME["ApiVersions"]
UPDATE = APIS_BY_NAME["UpdateFeatures"]
HEARTBEAT = APIS_BY_NAME["ConsumerGroupHeartbeat"]
UF = struct_classes(UPDATE.request)
CGH = struct_classes(HEARTBEAT.request)


@pytest.fixture
def cluster(tmp_path):
    cluster = ReplicatedCluster(tmp_path)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def finalized(bootstrap: str) -> dict[str, int] | None:
    try:
        with RawConnection(bootstrap, timeout_s=5) as conn:
            response = conn.request(
                API_VERSIONS, 4, struct_classes(API_VERSIONS.request).ApiVersionsRequest(
                    client_software_name="t", client_software_version="1")
            )
    except OSError:
        return None
    return {f.name: f.max_version_level for f in response.finalized_features}


def everywhere(cluster, levels: dict[str, int]) -> bool:
    return all(finalized(cluster.nodes[node].bootstrap) == levels for node in NODE_IDS)


def update(bootstrap: str, level: int, upgrade_type: int):
    item = UF.FeatureUpdateKey(feature=GROUP_VERSION, max_version_level=level, allow_downgrade=upgrade_type != 1,
                               upgrade_type=upgrade_type)
    with RawConnection(bootstrap, timeout_s=BOUND_S) as conn:
        return conn.request(UPDATE, 1, UF.UpdateFeaturesRequest(timeout_ms=20000, feature_updates=[item], validate_only=False))


def heartbeat_error(bootstrap: str) -> int:
    """A first ConsumerGroupHeartbeat's error: NOT_COORDINATOR or NONE when served, UNSUPPORTED_VERSION when not."""
    with RawConnection(bootstrap, timeout_s=10) as conn:
        return conn.request(HEARTBEAT, 0, CGH.ConsumerGroupHeartbeatRequest(
            group_id="features-cluster", member_id="", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["none-yet"], topic_partitions=[],
        )).error_code


def test_every_broker_reports_the_levels_after_a_forwarded_update(cluster):
    defaults = default_feature_levels()
    assert wait_until(lambda: everywhere(cluster, defaults), BOUND_S), [finalized(cluster.nodes[n].bootstrap) for n in NODE_IDS]
    writers = [n for n in NODE_IDS if "writing the bootstrap metadata" in cluster.nodes[n].log_text()]
    assert len(writers) == 1, writers  # the levels went into the log once
    controller = cluster.active_controller(BOUND_S)
    assert controller is not None
    via, other = [n for n in NODE_IDS if n != controller][:2]

    answer = update(cluster.nodes[via].bootstrap, 0, 2)  # SAFE_DOWNGRADE through a broker that forwards it
    assert (answer.error_code, [(r.feature, r.error_code) for r in answer.results]) == (0, [(GROUP_VERSION, 0)]), answer
    lowered = {n: v for n, v in defaults.items() if n != GROUP_VERSION}
    assert wait_until(lambda: everywhere(cluster, lowered), BOUND_S), [finalized(cluster.nodes[n].bootstrap) for n in NODE_IDS]
    for node in NODE_IDS:
        assert heartbeat_error(cluster.nodes[node].bootstrap) == ErrorCode.UNSUPPORTED_VERSION, node

    answer = update(cluster.nodes[other].bootstrap, 1, 1)
    assert answer.error_code == 0, answer
    assert wait_until(lambda: everywhere(cluster, defaults), BOUND_S), [finalized(cluster.nodes[n].bootstrap) for n in NODE_IDS]
    for node in NODE_IDS:
        assert heartbeat_error(cluster.nodes[node].bootstrap) != ErrorCode.UNSUPPORTED_VERSION, node
