"""A Jepsen-style fault suite: the compose cluster as namespaced processes,
clients that record every operation, a seeded nemesis, and a checker that
says whether anything acknowledged was lost, duplicated or read
inconsistently. ``python -m tests.faults --help``; docs/RELIABILITY.md."""
