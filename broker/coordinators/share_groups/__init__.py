"""KIP-932 share groups: queue-like consumption, many members per partition.

Pure modules (no IO, no clock; every operation takes ``now_ms``):
``partition`` (a share-partition's in-flight ranges, acquisition locks,
delivery counts, acknowledgements, and its durable state in
``__share_group_state`` records) and ``membership`` (ShareGroupHeartbeat: member
epochs, the simple assignor, session timeouts, and the group's records in
``__consumer_offsets``).
"""
