"""The compatibility matrix's check, shared by the three formats' tests: each row of a
format's EVOLUTIONS table (rule, old, new, BACKWARD?, FORWARD?, text every error names)
judged at every level, and the table holding a compatible and an incompatible pair per level."""

from __future__ import annotations

from protocol.schema_formats.formats import compatibility_errors

LEVELS = ("BACKWARD", "FORWARD", "FULL", "NONE")


def check_evolution(old_schema, new_schema, backward: bool, forward: bool, named: str) -> None:
    verdicts = {level: compatibility_errors(new_schema, [old_schema], level) for level in LEVELS}
    assert (not verdicts["BACKWARD"]) == backward, verdicts["BACKWARD"]
    assert (not verdicts["FORWARD"]) == forward, verdicts["FORWARD"]
    assert (not verdicts["FULL"]) == (backward and forward), verdicts["FULL"]
    assert verdicts["NONE"] == []
    for errors in verdicts.values():
        assert all(named in error for error in errors), errors


def check_table_has_both_verdicts(evolutions) -> None:
    for column in (3, 4):
        assert {row[column] for row in evolutions} == {True, False}
