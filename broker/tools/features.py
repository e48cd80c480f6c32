"""``pybroker features`` (like kafka-features.sh): describe, upgrade, downgrade
and disable the cluster's finalized feature levels (controller/features.py).

- ``describe``: ApiVersions v4 (v3 from an older broker) of the bootstrap
  broker, one line per feature it supports, sorted, tab-separated as Kafka's
  tool prints it: ``Feature: group.version<TAB>SupportedMinVersion: 0<TAB>
  SupportedMaxVersion: 1<TAB>FinalizedVersionLevel: 1<TAB>Epoch: 42`` (a
  feature not finalized is at level 0; the epoch is the metadata offset).
- ``upgrade --feature name=level``, ``downgrade --feature name=level
  [--unsafe]``, ``disable --feature name [--unsafe]`` (each ``--feature``
  repeatable): one UpdateFeatures request through the bootstrap broker, which
  forwards it to the active controller; the updates succeed or fail together.
  Per feature ``group.version was upgraded to 1.`` (``downgraded``,
  ``disabled``), or ``Could not upgrade group.version to 2. <reason>``, then
  ``N out of M operation(s) failed.`` on stderr and exit code 1.
- ``--dry-run``: the controller checks the updates and changes nothing (v1's
  ``validate_only``); the lines say ``can be upgraded`` / ``Can not upgrade``.

Kafka's ``--release-version`` (levels by Kafka release) and its
``version-mapping`` / ``feature-dependencies`` subcommands are not offered:
pybroker has no metadata.version, and its features do not depend on each other.

The formatting functions are pure: they take decoded responses and return lines.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from broker.tools.client import Refused, ToolClient, ToolError
from broker.tools.options import EXIT_CODES, add_client_options, settings_of
from controller.features import UpgradeType
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

_UPDATE = struct_classes(APIS_BY_NAME["UpdateFeatures"].request)
API_VERSIONS_VERSION = 4  # the first that carries a supported minimum of 0 as it is (KAFKA-17011)
UPDATE_FEATURES_MAX_VERSION = 2
# UpdateFeatures' own deadline, as Kafka's admin client's default request timeout.
UPDATE_TIMEOUT_MS = 30_000
VERBS = {"upgrade": "upgraded", "downgrade": "downgraded", "disable": "disabled"}


@dataclass(frozen=True)
class Update:
    name: str
    level: int
    upgrade_type: UpgradeType


def parse_updates(command: str, features: list[str], *, unsafe: bool = False) -> list[Update]:
    """The ``--feature`` arguments of ``command`` (upgrade, downgrade: name=level; disable: name)."""
    if not features:
        raise ToolError(f"You must specify at least one feature to {command}")
    if command == "upgrade":
        upgrade_type = UpgradeType.UPGRADE
    else:
        upgrade_type = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    updates: dict[str, Update] = {}
    for argument in features:
        if command == "disable":
            name, level = argument.strip(), 0
            if not name or "=" in name:
                raise ToolError(f"--feature: give a feature name to disable, not {argument!r}")
        else:
            name, equals, level_text = argument.partition("=")
            name = name.strip()
            if not equals or not name:
                raise ToolError(f"Can not parse feature=level string {argument}")
            try:
                level = int(level_text.strip())
            except ValueError:
                raise ToolError(f"Can not parse feature=level string {argument}") from None
        if name in updates:
            raise ToolError(f"Feature {name} was specified more than once.")
        updates[name] = Update(name, level, upgrade_type)
    return list(updates.values())


def describe_lines(response) -> list[str]:
    """kafka-features.sh describe's lines for a decoded ApiVersions v3+ response."""
    finalized = {f.name: f.max_version_level for f in response.finalized_features or []}
    epoch = response.finalized_features_epoch
    epoch_text = str(epoch) if epoch is not None and epoch >= 0 else "-"
    return [
        f"Feature: {f.name}\tSupportedMinVersion: {f.min_version}\tSupportedMaxVersion: {f.max_version}\t"
        f"FinalizedVersionLevel: {finalized.get(f.name, 0)}\tEpoch: {epoch_text}"
        for f in sorted(response.supported_features or [], key=lambda f: f.name)
    ]


def update_errors(response, updates: list[Update]) -> dict[str, str | None]:
    """Each feature's failure message (None: done), as Kafka's admin client reads
    the answer: a top-level error fails every feature; else its own result, if any."""
    if response.error_code != ErrorCode.NONE:
        message = response.error_message or ErrorCode(response.error_code).name
        return {u.name: message for u in updates}
    results = {r.feature: r for r in getattr(response, "results", None) or []}
    errors: dict[str, str | None] = {}
    for update in updates:
        result = results.get(update.name)
        if result is None or result.error_code == ErrorCode.NONE:
            errors[update.name] = None
        else:
            errors[update.name] = result.error_message or ErrorCode(result.error_code).name
    return errors


def update_lines(command: str, updates: list[Update], errors: dict[str, str | None], *, dry_run: bool) -> list[str]:
    verb = VERBS[command]
    lines = ["DRY RUN: no change was made."] if dry_run else []
    for update in sorted(updates, key=lambda u: u.name):
        target = "" if command == "disable" else f" to {update.level}"
        error = errors[update.name]
        if error is None:
            lines.append(f"{update.name} {'can be' if dry_run else 'was'} {verb}{target}.")
        else:
            lines.append(f"{'Can not' if dry_run else 'Could not'} {command} {update.name}{target}. {error}")
    return lines


class FeaturesTool:
    def __init__(self, bootstrap: str, timeout_s: float = 15.0, settings=None):
        self.client = ToolClient(bootstrap, timeout_s=timeout_s, settings=settings)

    def close(self) -> None:
        self.client.close()

    def _ranges(self) -> dict[int, tuple[int, int]]:
        response = self.client.bootstrap_connection().call("ApiVersions", 0)
        if response.error_code != ErrorCode.NONE:
            raise ToolError(f"ApiVersions: {ErrorCode(response.error_code).name}")
        return {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}

    def describe(self):
        """The bootstrap broker's ApiVersions response at the highest version up to 4 (3 at least)."""
        high = self._ranges()[APIS_BY_NAME["ApiVersions"].key][1]
        if high < 3:
            raise Refused(f"the broker's ApiVersions has no feature fields (it answers up to v{high})")
        return self.client.bootstrap_connection().call(
            "ApiVersions", min(high, API_VERSIONS_VERSION),
            client_software_name="pybroker-features", client_software_version="1",
        )

    def update(self, updates: list[Update], *, dry_run: bool):
        supported = self._ranges().get(APIS_BY_NAME["UpdateFeatures"].key)
        if supported is None:
            raise Refused("the broker does not serve UpdateFeatures")
        version = min(supported[1], UPDATE_FEATURES_MAX_VERSION)
        if version < 1 and (dry_run or any(u.upgrade_type == UpgradeType.UNSAFE_DOWNGRADE for u in updates)):
            raise Refused("the broker's UpdateFeatures v0 has neither --dry-run nor --unsafe")
        items = [
            _UPDATE.FeatureUpdateKey(
                feature=u.name,
                max_version_level=u.level,
                allow_downgrade=u.upgrade_type != UpgradeType.UPGRADE,
                upgrade_type=int(u.upgrade_type),
            )
            for u in updates
        ]
        return self.client.bootstrap_connection().call(
            "UpdateFeatures", version, timeout_ms=UPDATE_TIMEOUT_MS, feature_updates=items, validate_only=dry_run
        )


def cmd_features(args) -> int:
    tool = None
    try:
        command = args.features_command
        updates = None
        if command != "describe":
            updates = parse_updates(command, args.feature or [], unsafe=getattr(args, "unsafe", False))
        tool = FeaturesTool(args.bootstrap_server, timeout_s=args.timeout, settings=settings_of(args))
        if command == "describe":
            for line in describe_lines(tool.describe()):
                print(line)
            return 0
        errors = update_errors(tool.update(updates, dry_run=args.dry_run), updates)
        for line in update_lines(command, updates, errors, dry_run=args.dry_run):
            print(line)
        failed = sum(1 for e in errors.values() if e is not None)
        if failed:
            print(f"{failed} out of {len(updates)} operation(s) failed.", file=sys.stderr)
            return 1
        return 0
    except ToolError as exc:
        print(f"pybroker features: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if tool is not None:
            tool.close()


def register(commands) -> None:
    parser = commands.add_parser(
        "features",
        help="describe or change the cluster's finalized feature levels (like kafka-features.sh)",
        description="'describe' prints each feature the broker supports with its finalized level; 'upgrade', "
        "'downgrade' and 'disable' change levels through the active controller (all or nothing). " + EXIT_CODES,
    )
    add_client_options(parser)
    subcommands = parser.add_subparsers(dest="features_command", required=True)

    def client_options_after(sub) -> None:
        # Kafka's tool takes them before the subcommand; accepted after it too, without
        # a default of their own that would hide the one given before.
        sub.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT", help="a broker to ask")
        sub.add_argument("--command-config", default=argparse.SUPPRESS, metavar="FILE", help="as before the subcommand")
        sub.add_argument("--timeout", type=float, default=argparse.SUPPRESS, metavar="SECONDS", help="socket timeout")

    client_options_after(subcommands.add_parser("describe", help="the supported and finalized levels of every feature"))
    for command, text in (
        ("upgrade", "raise feature levels, e.g. --feature group.version=1"),
        ("downgrade", "lower feature levels, e.g. --feature group.version=0"),
        ("disable", "set features to level 0, e.g. --feature group.version"),
    ):
        sub = subcommands.add_parser(command, help=text)
        client_options_after(sub)
        sub.add_argument(
            "--feature", action="append", metavar="NAME=LEVEL" if command != "disable" else "NAME",
            help="a feature to change (repeatable)",
        )
        sub.add_argument("--dry-run", action="store_true", help="check the change with the controller, make none")
        if command != "upgrade":
            sub.add_argument(
                "--unsafe", action="store_true",
                help="an UNSAFE_DOWNGRADE (Kafka's: may lose metadata; pybroker's features lose none either way)",
            )
    parser.set_defaults(func=cmd_features)
