"""``pybroker groups --describe``'s three layouts and ``--list``'s table, line for
line as kafka-consumer-groups.sh 4.x prints them: its column widths (at least
15, GROUP, TOPIC, CONSUMER-ID and HOST widened to their longest value;
PARTITION 10; GROUP-INSTANCE-ID at least 17; COORDINATOR (ID) at least 25;
CURRENT-ASSIGNMENT at least 20), one space between columns, ``-`` for what is
missing (a classic group has no epochs and no target assignment), a blank line
before each block."""

from __future__ import annotations

from broker.tools.groups import (
    GroupDescription,
    GroupListing,
    MemberRow,
    PartitionRow,
    assignment_text,
    group_notice,
    list_lines,
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
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   "
        "CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT",
        "billing         m-1             /10.0.0.7       client-a        3               -               "
        "audit:3;orders:0,1   -               -",
        "billing         m-2             /10.0.0.8       client-b        0               -               "
        "-                    -               -",
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
    assert state_lines(description(members=[MemberRow("m-1", None, "/h", "c")]), verbose=True)[1:] == [
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE                GROUP-EPOCH     "
        "TARGET-ASSIGNMENT-EPOCH   #MEMBERS",
        "billing         broker-1:9092  (1)        range                Stable               -               "
        "-                         1",
    ]


def consumer_group(**kwargs) -> GroupDescription:
    """A KIP-848 group: epochs, and each member's target beside its current assignment."""
    long_assignment = [("orders-with-a-long-name", p) for p in range(4)]
    members = [
        MemberRow("m-1", None, "/10.0.0.7", "client-a", [("orders", 0), ("orders", 1)], [("orders", 0)], 7),
        MemberRow("m-2", None, "/10.0.0.8", "client-b", [], [("orders", 1)] + long_assignment, 6),
    ]
    return description(protocol="uniform", state="Reconciling", members=members, group_type="consumer",
                       group_epoch=7, target_assignment_epoch=7, **kwargs)


def test_consumer_group_layouts_show_epochs_and_target_assignments():
    target = "orders-with-a-long-name:0,1,2,3;orders:1"
    assert members_lines(consumer_group(), verbose=True)[1:] == [
        "GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-EPOCH   "
        "CURRENT-ASSIGNMENT   TARGET-EPOCH    TARGET-ASSIGNMENT",
        "billing         m-1             /10.0.0.7       client-a        2               7               "
        "orders:0,1           7               orders:0",
        "billing         m-2             /10.0.0.8       client-b        0               6               "
        f"-                    7               {target}",
    ]
    assert state_lines(consumer_group(), verbose=True)[2] == (
        "billing         broker-1:9092  (1)        uniform              Reconciling          7               "
        "7                         2"
    )
    assert state_lines(consumer_group())[2].split() == ["billing", "broker-1:9092", "(1)", "uniform", "Reconciling", "2"]
    assert group_notice(consumer_group()) == "Warning: Consumer group 'billing' is rebalancing."
    # A current assignment longer than 20 widens its column.
    wide = consumer_group()
    wide.members[0].assignment = [("orders-with-a-long-name", p) for p in range(4)]
    lines = members_lines(wide, verbose=True)
    assert lines[1].index("TARGET-EPOCH") == lines[1].index("CURRENT-ASSIGNMENT") + len(target) - len(";orders:1") + 1


def test_offsets_verbose_adds_the_leader_epoch():
    rows = [PartitionRow("orders", 0, 5, 20, "m-1", "/h", "c", leader_epoch=3), PartitionRow("orders", 1, None, 7)]
    lines = offsets_lines(description(partitions=rows), verbose=True)
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[2] == ("billing         orders          0          3               5               20              "
                        "15              m-1             /h              c")
    assert lines[3].split() == ["billing", "orders", "1", "-", "-", "7", "-", "-", "-", "-"]


def test_list_table_with_type_and_state():
    groups = [GroupListing("a-classic-group", "consumer", "Stable", "classic"),
              GroupListing("new", "consumer", "Reconciling", "consumer")]
    assert list_lines(groups, with_type=True, with_state=True) == [
        "GROUP                     TYPE                 STATE",
        "a-classic-group           Classic              Stable",
        "new                       Consumer             Reconciling",
    ]
    assert list_lines(groups, with_type=True, with_state=False)[2] == "new                       Consumer"
    assert list_lines(groups, with_type=False, with_state=True)[1] == "a-classic-group           Stable"
    # What Kafka's tool lists: consumer-protocol classic groups, offsets-only groups and consumer groups.
    assert [g.is_consumer_group for g in groups] == [True, True]
    assert not GroupListing("connect-cluster", "connect", "Stable", "classic").is_consumer_group
    assert not GroupListing("queue", "share", "Stable", "share").is_consumer_group
    assert GroupListing("offsets-only", "", "Empty", "classic").is_consumer_group
