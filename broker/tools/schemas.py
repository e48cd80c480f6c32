"""``pybroker schemas --registry-url URL``: the schema registry from the command line,
with the flags of Kafka's tools. It is a client of Confluent Schema Registry's
REST API (broker/http/schema_registry.py, or any registry speaking it) over
HTTP, with the standard library.

- ``--register --subject S --schema-file F [--schema-type AVRO|JSON|PROTOBUF]
  [--reference name=subject:version ...] [--normalize]``: POST
  /subjects/S/versions, then the version it got (POST /subjects/S);
- ``--list [--deleted]``: the subjects;
- ``--describe --subject S [--version V|latest]``: a version (default latest)
  with its id, type, references and schema text;
- ``--versions --subject S [--deleted]``: the subject's versions;
- ``--check --subject S --schema-file F [--version V] [--verbose]``: POST
  /compatibility; without ``--version`` against the versions the subject's
  level names (what a registration would be checked against). Not compatible
  is exit code 1 (``--verbose``: with the registry's reasons);
- ``--delete --subject S [--version V] [--permanent]``: soft delete, then
  permanent (Confluent's two steps);
- ``--config [--subject S] [--set-compatibility LEVEL]``, ``--mode [--subject
  S] [--set-mode MODE]``: read (a subject without its own setting shows the
  global one, said so) or set;
- ``--output json`` on every action: one JSON document on stdout.

A refusal prints the registry's message and error code (``Subject 'x' not
found. (error code 40401)``), exit code 1; usage and connection problems exit
with 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from broker.tools.cli_common import DISTRIBUTION, package_version
from broker.tools.client import Refused, ToolError

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
DEFAULT_REGISTRY_URL = "http://localhost:8081"
DEFAULT_SCHEMA_TYPE = "AVRO"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
ACTIONS = ("register", "list", "describe", "versions", "check", "delete", "config", "mode")
EXIT_CODES = (
    "Exit code: 0; 1 when the registry refuses the request, what is named does not exist, "
    "or --check finds the schema not compatible; 2 on usage or connection errors."
)


class RegistryRefused(Refused):
    """The registry answered with an error: its message and Confluent error code."""

    def __init__(self, status: int, code: int | None, message: str):
        shown = f"{message} (error code {code})" if code is not None else f"HTTP {status}: {message}"
        super().__init__(shown)
        self.status = status
        self.code = code
        self.message = message


class RegistryClient:
    """Calls to one registry: JSON in, JSON out, errors as :class:`RegistryRefused`."""

    def __init__(self, url: str, timeout_s: float):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ToolError(f"--registry-url: expected http://HOST:PORT, got {url!r}")
        self.base = url.rstrip("/")
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body=None, **query):
        params = {k: ("true" if v is True else v) for k, v in query.items() if v not in (None, False)}
        url = self.base + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": MEDIA_TYPE}
        if data is not None:
            headers["Content-Type"] = MEDIA_TYPE
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise _refusal(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ToolError(f"cannot reach the schema registry at {self.base}: {reason}") from None
        try:
            return json.loads(payload) if payload else None
        except ValueError:
            raise ToolError(f"the schema registry at {self.base} answered {method} {path} with something not JSON") from None

    def get(self, path: str, **query):
        return self.request("GET", path, **query)


def _refusal(status: int, payload: bytes) -> RegistryRefused:
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if isinstance(body, dict) and "message" in body:
        code = body.get("error_code")
        return RegistryRefused(status, code if isinstance(code, int) else None, str(body["message"]))
    return RegistryRefused(status, None, payload.decode(errors="replace").strip()[:200] or "no message")


def _segment(text: str) -> str:
    # A subject may hold any character ("/" included): one path segment, escaped.
    return urllib.parse.quote(text, safe="")


def parse_reference(text: str) -> dict:
    """``name=subject:version`` (a version number, as Confluent stores references) as a
    register body's reference."""
    name, equals, rest = text.partition("=")
    subject, colon, version = rest.rpartition(":")
    if not (equals and colon and name and subject):
        raise ToolError(f"--reference: expected name=subject:version, got {text!r}")
    try:
        number = int(version)
    except ValueError:
        raise ToolError(f"--reference {text}: the version must be a number") from None
    return {"name": name, "subject": subject, "version": number}


def read_schema_file(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as exc:
        raise ToolError(f"--schema-file {path}: {exc.strerror or exc}") from None


def schema_body(args) -> dict:
    body = {"schema": read_schema_file(args.schema_file)}
    if args.schema_type != DEFAULT_SCHEMA_TYPE:
        body["schemaType"] = args.schema_type
    references = [parse_reference(r) for r in args.reference or []]
    if references:
        body["references"] = references
    return body


# ----------------------------------------------------------------------------- the actions


def _version_path(subject: str, version: str | None) -> str:
    return f"/subjects/{_segment(subject)}/versions" + (f"/{_segment(version)}" if version else "")


def register(client: RegistryClient, args) -> tuple[dict, list[str]]:
    body = schema_body(args)
    answer = client.request("POST", _version_path(args.subject, None), body, normalize=args.normalize)
    found = client.request("POST", f"/subjects/{_segment(args.subject)}", body, normalize=args.normalize)
    result = {"subject": args.subject, "version": found["version"], "id": answer["id"]}
    return result, [f"Registered schema id {result['id']} as version {result['version']} of subject {args.subject}."]


def list_subjects(client: RegistryClient, args) -> tuple[dict, list[str]]:
    subjects = client.get("/subjects", deleted=args.deleted)
    return {"subjects": subjects}, list(subjects)


def versions(client: RegistryClient, args) -> tuple[dict, list[str]]:
    numbers = client.get(_version_path(args.subject, None), deleted=args.deleted)
    return {"subject": args.subject, "versions": numbers}, [str(n) for n in numbers]


def describe(client: RegistryClient, args) -> tuple[dict, list[str]]:
    value = client.get(_version_path(args.subject, args.version or "latest"))
    value.setdefault("schemaType", DEFAULT_SCHEMA_TYPE)
    value.setdefault("references", [])
    lines = [f"Subject: {value['subject']}\tVersion: {value['version']}\tId: {value['id']}\tType: {value['schemaType']}"]
    lines += [f"\tReference: {r['name']}\tSubject: {r['subject']}\tVersion: {r['version']}" for r in value["references"]]
    lines.append(value["schema"])
    return value, lines


def check(client: RegistryClient, args) -> tuple[dict, list[str]]:
    path = f"/compatibility{_version_path(args.subject, args.version)}"
    answer = client.request("POST", path, schema_body(args), verbose=True)
    compatible = bool(answer.get("is_compatible"))
    against = f"version {args.version}" if args.version else "the versions its compatibility level checks"
    result = {"subject": args.subject, "version": args.version, "is_compatible": compatible}
    if args.verbose:
        result["messages"] = answer.get("messages", [])
    verdict = "compatible with" if compatible else "NOT compatible with"
    lines = [f"The schema is {verdict} subject {args.subject} ({against})."]
    if args.verbose:
        lines += [f"\t{message}" for message in answer.get("messages", [])]
    return result, lines


def delete(client: RegistryClient, args) -> tuple[dict, list[str]]:
    how = "permanently" if args.permanent else "soft"
    if args.version:
        deleted = client.request("DELETE", _version_path(args.subject, args.version), permanent=args.permanent)
        result = {"subject": args.subject, "versions": [deleted], "permanent": args.permanent}
    else:
        deleted = client.request("DELETE", f"/subjects/{_segment(args.subject)}", permanent=args.permanent)
        result = {"subject": args.subject, "versions": deleted, "permanent": args.permanent}
    listed = ", ".join(str(v) for v in result["versions"])
    return result, [f"Deleted ({how}) version(s) {listed} of subject {args.subject}."]


def _setting(client: RegistryClient, args, resource: str, field: str, new_value: str | None, body_field: str):
    """GET or PUT /config or /mode (global or a subject's): the value and whether it is the global one."""
    path = f"/{resource}" + (f"/{_segment(args.subject)}" if args.subject else "")
    if new_value is not None:
        answer = client.request("PUT", path, {body_field: new_value})
        return answer[body_field], False, True
    try:
        return client.get(path)[field], args.subject is None, False
    except RegistryRefused as exc:
        # 40408/40409: the subject has no setting of its own; the global one applies.
        if args.subject is None or exc.code not in (40408, 40409):
            raise
    return client.get(f"/{resource}")[field], True, False


def config(client: RegistryClient, args) -> tuple[dict, list[str]]:
    level, is_global, changed = _setting(client, args, "config", "compatibilityLevel", args.set_compatibility, "compatibility")
    return _setting_output("compatibility", args.subject, level, is_global, changed)


def mode(client: RegistryClient, args) -> tuple[dict, list[str]]:
    value, is_global, changed = _setting(client, args, "mode", "mode", args.set_mode, "mode")
    return _setting_output("mode", args.subject, value, is_global, changed)


def _setting_output(name: str, subject: str | None, value: str, is_global: bool, changed: bool) -> tuple[dict, list[str]]:
    result = {"subject": subject, name: value, "global": is_global}
    who = f"subject {subject}" if subject else "the registry (global)"
    if changed:
        return result, [f"Set the {name} of {who} to {value}."]
    inherited = " (the global setting: the subject has none of its own)" if subject and is_global else ""
    return result, [f"The {name} of {who} is {value}{inherited}."]


RUNNERS = {
    "register": register, "list": list_subjects, "describe": describe, "versions": versions,
    "check": check, "delete": delete, "config": config, "mode": mode,
}
NEEDS_SUBJECT = {"register", "describe", "versions", "check", "delete"}
NEEDS_SCHEMA = {"register", "check"}


def _validate(action: str, args) -> None:
    if action in NEEDS_SUBJECT and not args.subject:
        raise ToolError(f"--{action} needs --subject")
    if action in NEEDS_SCHEMA and not args.schema_file:
        raise ToolError(f"--{action} needs --schema-file")
    pairs = (
        ("schema_file", "--schema-file", NEEDS_SCHEMA), ("reference", "--reference", NEEDS_SCHEMA),
        ("normalize", "--normalize", {"register"}), ("deleted", "--deleted", {"list", "versions"}),
        ("version", "--version", {"describe", "check", "delete"}), ("verbose", "--verbose", {"check"}),
        ("permanent", "--permanent", {"delete"}), ("set_compatibility", "--set-compatibility", {"config"}),
        ("set_mode", "--set-mode", {"mode"}),
    )
    for attribute, flag, actions in pairs:
        if getattr(args, attribute) and action not in actions:
            raise ToolError(f"{flag} goes with " + " or ".join(f"--{a}" for a in sorted(actions)))
    if args.subject and action == "list":
        raise ToolError("--list lists every subject: it takes no --subject")


def cmd_schemas(args) -> int:
    try:
        action = next(a for a in ACTIONS if getattr(args, a))
        _validate(action, args)
        client = RegistryClient(args.registry_url, args.timeout)
        result, lines = RUNNERS[action](client, args)
        if args.output == "json":
            print(json.dumps(result))
        else:
            for line in lines:
                print(line)
        if action == "check" and not result["is_compatible"]:
            return Refused.exit_code
        return 0
    except ToolError as exc:
        print(f"pybroker schemas: {exc}", file=sys.stderr)
        return exc.exit_code


class _VersionOrSubjectVersion(argparse.Action):
    """``--version V``: a subject's version; ``--version`` without a value: the package's."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values is None:
            print(f"{DISTRIBUTION} {package_version()}")  # on stdout, as argparse's version action
            parser.exit()
        setattr(namespace, self.dest, values)


def register_command(commands) -> None:
    parser = commands.add_parser(
        "schemas",
        help="register, list, describe, check and delete schemas of a schema registry (Confluent's REST API)",
        description="A client of the schema registry's REST API (schema.registry.listener, or any registry "
        "speaking Confluent's). " + EXIT_CODES,
    )
    parser.add_argument("--registry-url", default=DEFAULT_REGISTRY_URL, metavar="URL",
                        help=f"the registry (default {DEFAULT_REGISTRY_URL})")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="per request (default 30)")
    action = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("register", "register --schema-file under --subject (the same schema again: its id again)"),
        ("list", "list the subjects"),
        ("describe", "a version of --subject (default latest): id, type, references, schema"),
        ("versions", "the versions of --subject"),
        ("check", "is --schema-file compatible with --subject? (exit code 1 when not)"),
        ("delete", "delete --subject, or its --version (soft; then --permanent)"),
        ("config", "the compatibility level, global or of --subject (--set-compatibility changes it)"),
        ("mode", "the mode, global or of --subject (--set-mode changes it)"),
    ):
        action.add_argument(f"--{name}", action="store_true", help=text)
    parser.add_argument("--subject", metavar="SUBJECT", help="the subject (e.g. orders-value)")
    parser.add_argument("--schema-file", metavar="FILE", help="with --register/--check: the schema text (- for stdin)")
    parser.add_argument("--schema-type", type=str.upper, choices=SCHEMA_TYPES, default=DEFAULT_SCHEMA_TYPE,
                        help=f"with --schema-file (default {DEFAULT_SCHEMA_TYPE})")
    parser.add_argument("--reference", action="append", metavar="NAME=SUBJECT:VERSION",
                        help="with --schema-file: a schema it references (repeatable)")
    parser.add_argument("--normalize", action="store_true", help="with --register: normalize the schema first")
    parser.add_argument("--deleted", action="store_true", help="with --list/--versions: soft-deleted ones too")
    # --version alone is the package version, as on every subcommand (broker/tools/cli_common.py).
    parser.add_argument("--version", nargs="?", action=_VersionOrSubjectVersion, metavar="V|latest",
                        help="with --describe, --check, --delete: one version of the subject; "
                        "alone: print pybroker's version and exit")
    parser.add_argument("--verbose", action="store_true", help="with --check: the reasons")
    parser.add_argument("--permanent", action="store_true", help="with --delete: remove what was soft-deleted")
    parser.add_argument("--set-compatibility", metavar="LEVEL",
                        help="with --config: BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, "
                        "FULL_TRANSITIVE or NONE")
    parser.add_argument("--set-mode", metavar="MODE", help="with --mode: READWRITE, READONLY or IMPORT")
    parser.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document")
    parser.set_defaults(func=cmd_schemas)
