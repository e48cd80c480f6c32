"""``pybroker groups --describe``'s three layouts, line for line as
kafka-consumer-groups.sh prints them: its column widths (at least 15, GROUP,
TOPIC, CONSUMER-ID and HOST widened to their longest value; PARTITION 10;
GROUP-INSTANCE-ID at least 17; COORDINATOR (ID) at least 25), one space
between columns, ``-`` for what is missing, a blank line before each block."""

from __future__ import annotations

from broker.tools.groups import (
    GroupDescription,
    MemberRow,
    PartitionRow,
    assignment_text,
    group_notice,
    members_lines,
    offsets_lines,
    state_lines,
)


def description(**kwargs) -> GroupDescription:
    values = {"group_id": "billing", "state": "Stable", "protocol_type": "consumer", "protocol": "range",
                  "coordinator": "broker-1:9092", "partitions": [], "members": [], "coordinator_id": 1}
    values.update(kwargs)
    return GroupDescription(**values)


def test_offsets_layout():
    member = "consumer-1-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
    rows = [
        PartitionRow("orders", 0, 5, 20, member, "/10.0.0.7", "consumer-1"),
        PartitionRow("orders", 1, None, 7),
    ]
    lines = offsets_lines(description(partitions=rows))
    assert lines == [
        "",
        ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
        f"CONSUMER-ID{' ' * (len(member) - len('CONSUMER-ID'))} HOST            CLIENT-ID"),
        (f"billing         orders          0          5               20              15              {member} "
        "/10.0.0.7       consumer-1"),
        (f"billing         orders          1          -               7               -               -{' ' * (len(member) - 1)} "
        "-               -"),
    ]
    assert offsets_lines(description()) == []  # no rows: no table, as Kafka


def test_members_layout_with_and_without_instance_ids_and_assignments():
    members = [
        MemberRow("m-1", None, "/10.0.0.7", "client-a", [("orders", 1), ("orders", 0), ("audit", 3)]),
        MemberRow("m-2", None, "/10.0.0.8", "client-b", []),
    ]
    assert members_lines(description(members=members)) == [
        "",
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS",
        "billing         m-1             /10.0.0.7       client-a        3",
        "billing         m-2             /10.0.0.8       client-b        0",
    ]
    assert members_lines(description(members=members), verbose=True)[1:] == [
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     ASSIGNMENT",
        "billing         m-1             /10.0.0.7       client-a        3               audit(3), orders(0,1)",
        "billing         m-2             /10.0.0.8       client-b        0               -",
    ]
    members[1].group_instance_id = "static-2"
    assert members_lines(description(members=members))[1:] == [
        "GROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS",
        "billing         m-1             -                 /10.0.0.7       client-a        3",
        "billing         m-2             static-2          /10.0.0.8       client-b        0",
    ]
    assert members_lines(description(members=[], state="Empty")) == []


def test_state_layout_and_notes():
    lines = state_lines(description(members=[MemberRow("m-1", None, "/h", "c")]))
    assert lines == [
        "",
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                #MEMBERS",
        "billing         broker-1:9092  (1)        range                Stable               1",
    ]
    empty = description(state="Empty", protocol="")
    assert state_lines(empty)[2].split() == ["billing", "broker-1:9092", "(1)", "-", "Empty", "0"]
    assert group_notice(empty) == "Consumer group 'billing' has no active members."
    assert group_notice(description(state="PreparingRebalance")) == "Warning: Consumer group 'billing' is rebalancing."
    assert group_notice(description()) is None
    assert assignment_text([]) == "-"
