"""What the console's Schemas and subject pages show: the schema registry, read-only.

The registry's state comes from the broker's own SchemaRegistryService
(broker/schemas/service.py): every broker replays ``_schemas``, and
``read_state()`` first catches up to the leader's high watermark, so the pages
show what the registry's API would answer at that moment, with no HTTP to it;
they work whether or not this broker sets ``schema.registry.listener``. A
cluster where nothing was ever registered has no ``_schemas`` topic yet: the
pages say so and show the defaults (BACKWARD, READWRITE). Nothing here writes.

A subject's page pretty-prints each version (AVRO and JSON re-indented with
their keys in their own order, PROTOBUF as registered), diffs two versions
(a unified diff of the pretty-printed texts, by difflib), and checks the latest
live version against each earlier live one at the subject's compatibility
level, one earlier version at a time, as ``compatibility_errors`` checks a
registration (the transitive levels require every earlier version, the others
only the one before the latest). As the registry, versions of another schema
type are not compared.
"""

from __future__ import annotations

import difflib
import json

from protocol.schema_formats import formats
from broker.schemas.state import RegistryError

# Bounds of one page's work: subjects listed, earlier versions parsed and compared.
MAX_SUBJECTS = 5000
MAX_COMPARED = 100
# Lines of context around each change in a diff, as ``diff -u``.
DIFF_CONTEXT_LINES = 3
NEVER_USED = "The schema registry has not been used yet: there is no _schemas topic (it is created by the first write, a registration or a config or mode change)."


def pretty(schema_type: str, text: str) -> str:
    """A schema text for reading: JSON (AVRO, JSON) indented, keys kept in order
    (an Avro record's fields are ordered); anything unreadable as JSON as it is."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return text.rstrip("\n")


def diff_lines(old_text: str, new_text: str, old_label: str, new_label: str) -> list[tuple[str, str]]:
    """(kind, line) of the unified diff of two texts; kind is header, hunk, add,
    remove or same. Empty when the texts are equal."""
    lines = []
    diff = difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), old_label, new_label, n=DIFF_CONTEXT_LINES, lineterm="")
    for line in diff:
        if line.startswith(("---", "+++")) and len(lines) < 2:
            kind = "header"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "remove"
        else:
            kind = "same"
        lines.append((kind, line))
    return lines


async def _state(broker):
    """(RegistryState or None, notes): None when there is nothing to read."""
    if not broker.is_broker:
        return None, ["This node is not a broker: it keeps no schema registry."]
    service = broker.schemas
    if not service.shell.topic_exists():
        return None, [NEVER_USED]
    try:
        return await service.read_state(), []
    except RegistryError as exc:  # no leader yet, a leader that does not answer
        return None, [f"the schema registry could not be read: {exc.message}"]


def _served(broker) -> str:
    listener = broker.config["schema.registry.listener"]
    return str(listener) if listener is not None else ""


def _level(state, subject: str) -> tuple[str, str]:
    """The subject's compatibility level and where it comes from (subject or global)."""
    own = state.compatibility(subject, default_to_global=False)
    return (own, "subject") if own is not None else (state.compatibility(None), "global")


async def registry_overview(broker, *, deleted: bool = False) -> dict:
    """Every subject (soft-deleted ones with ``deleted``) with its latest version,
    type, id, compatibility level and mode; the global config and mode."""
    state, notes = await _state(broker)
    overview = {
        "served_on": _served(broker),
        "deleted": deleted,
        "notes": notes,
        "subjects": [],
        "not_shown": 0,
        "global_compatibility": formats.DEFAULT_COMPATIBILITY,
        "global_mode": "READWRITE",
        "schemas": 0,
        "max_id": 0,
    }
    if state is None:
        return overview
    overview["global_compatibility"] = state.compatibility(None)
    overview["global_mode"] = state.mode(None)
    overview["schemas"] = len(state.ids)
    overview["max_id"] = state.max_id
    names = state.subject_names(deleted=deleted)
    overview["not_shown"] = max(0, len(names) - MAX_SUBJECTS)
    for subject in names[:MAX_SUBJECTS]:
        every = state.live_versions(subject, deleted=True)
        live = [v for v in every if not v.deleted]
        latest = live[-1] if live else every[-1]
        level, level_source = _level(state, subject)
        overview["subjects"].append({
            "subject": subject,
            "version": latest.version,
            "versions": len(live),
            "deleted_versions": len(every) - len(live),
            "subject_deleted": not live,
            "schema_type": latest.schema_type,
            "id": latest.schema_id,
            "compatibility": level,
            "compatibility_source": level_source,
            "mode": state.mode(subject, default_to_global=False) or "",
        })
    return overview


def _parse_version(raw: str) -> int | None:
    try:
        return int(raw) if raw.strip() else None
    except ValueError:
        return None


def _compatibility_rows(state, level: str, live: list) -> list[dict]:
    """The latest live version checked against each earlier live one (newest
    first, at most MAX_COMPARED), and whether the level requires it: as the
    registry, only earlier versions of the latest's type count, all of them at a
    transitive level, else the last of them."""
    if len(live) < 2:
        return []
    latest = live[-1]
    same_type = [v.version for v in live[:-1] if v.schema_type == latest.schema_type]
    transitive = level.endswith("_TRANSITIVE")
    rows = []
    new = new_error = None
    try:
        new = state.parsed_of(latest)
    except (formats.SchemaInvalid, RegistryError) as exc:
        new_error = f"version {latest.version}: {_message(exc)}"
    for value in reversed(live[:-1][-MAX_COMPARED:]):
        of_type = value.schema_type == latest.schema_type
        required = level != "NONE" and of_type and (transitive or value.version == same_type[-1])
        row = {"version": value.version, "schema_type": value.schema_type, "required": required, "errors": []}
        if not of_type:
            row["result"] = "other type"
        elif level == "NONE":
            row["result"] = "not checked"
        elif new_error is not None:
            row["result"], row["errors"] = "unreadable", [new_error]
        else:
            try:
                # One earlier schema at a time: a transitive level checks each as its plain level would.
                row["errors"] = formats.compatibility_errors(new, [state.parsed_of(value)], level)
                row["result"] = "incompatible" if row["errors"] else "compatible"
            except (formats.SchemaInvalid, RegistryError) as exc:
                row["result"], row["errors"] = "unreadable", [f"version {value.version}: {_message(exc)}"]
        rows.append(row)
    return rows


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, RegistryError) else str(exc)


async def subject_detail(broker, subject: str, *, deleted: bool = False, diff_from: str = "", diff_to: str = "") -> dict | None:
    """A subject's versions (soft-deleted ones with ``deleted``), each pretty-printed
    with its references; a diff of two versions (``diff_from``, ``diff_to``; by
    default the one before the latest and the latest); the compatibility of the
    latest with each earlier version. None when the registry has no such subject
    (or only soft-deleted versions of it and not ``deleted``); ``missing`` with
    the notes and a status (404 never used, 503 unreadable) when there is no
    registry state to read."""
    state, notes = await _state(broker)
    if state is None:
        # Never used: no subject at all (404); not readable now: 503.
        return {"subject": subject, "notes": notes, "missing": True, "status": 404 if notes == [NEVER_USED] else 503}
    every = state.live_versions(subject, deleted=True)
    shown = [v for v in every if deleted or not v.deleted]
    if not shown:
        return None
    live = [v for v in every if not v.deleted]
    level, level_source = _level(state, subject)
    texts = {v.version: pretty(v.schema_type, v.schema) for v in shown}
    versions = [{
        "version": v.version,
        "id": v.schema_id,
        "schema_type": v.schema_type,
        "deleted": v.deleted,
        "text": texts[v.version],
        "references": [{"name": r.name, "subject": r.subject, "version": r.version} for r in v.references],
    } for v in reversed(shown)]  # fmt: skip
    detail = {
        "subject": subject,
        "missing": False,
        "status": 200,
        "notes": notes,
        "deleted": deleted,
        "versions": versions,
        "deleted_versions": len(every) - len(live),
        "latest": live[-1].version if live else None,
        "compatibility": level,
        "compatibility_source": level_source,
        "mode": state.mode(subject),
        "mode_source": "subject" if state.mode(subject, default_to_global=False) is not None else "global",
        "compatibility_rows": _compatibility_rows(state, level, live),
        "compared_max": MAX_COMPARED,
        "diff": None,
        "diff_error": "",
        "diff_from": None,
        "diff_to": None,
    }
    numbers = [v.version for v in shown]
    default_to = numbers[-1]
    default_from = numbers[-2] if len(numbers) > 1 else numbers[-1]
    old = _parse_version(diff_from) if diff_from.strip() else default_from
    new = _parse_version(diff_to) if diff_to.strip() else default_to
    for raw, number in ((diff_from, old), (diff_to, new)):
        if number is None or number not in texts:
            detail["diff_error"] = f"no version {raw.strip()!r} of this subject{'' if deleted else ' (soft-deleted versions are shown with deleted versions on)'}"
            break
    else:
        detail["diff_from"], detail["diff_to"] = old, new
        detail["diff"] = diff_lines(texts[old], texts[new], f"version {old}", f"version {new}")
    return detail
