"""A KRaft-style Raft quorum (KIP-595, with KIP-996 pre-vote) as a pure core.

`node.RaftNode` is the state machine: inputs are received messages, ticks and
proposals; outputs say what to persist, whether to flush the log, what to send
and when to call again. `log.RaftLog` is the log it reads and appends to;
`log.MemoryRaftLog` implements it in memory for tests and simulation.
"""
