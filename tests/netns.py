"""Network namespaces for multi-node tests: a private network of hosts joined
by a bridge, each host a namespace with its own IP and /etc/hosts, with no
Docker engine needed (iproute2 as root).

A ``VirtualNetwork`` owns everything it makes (namespaces named with a random
prefix, the bridge's own namespace, veth pairs, the /etc/netns/<ns>/hosts files
that ``ip netns exec`` bind-mounts over /etc/hosts) and removes it on
``close``, also after a failed start. The test process stays in the host
namespace and reaches the hosts through one more veth into the bridge.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

ETC_NETNS = Path("/etc/netns")


class NamespaceUnavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, no permission)."""


class NetemUnavailable(Exception):
    """The kernel has no netem queueing discipline (sch_netem)."""


# A locally administered unicast address that no interface here carries.
UNOWNED_MAC = "02:00:5e:10:de:ad"


def _run(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=20)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {result.stderr.strip()}")


def check_available() -> None:
    if os.geteuid() != 0:
        raise NamespaceUnavailable("network namespaces need root")
    if shutil.which("ip") is None:
        raise NamespaceUnavailable("iproute2's `ip` is not installed")
    probe = f"pbprobe{uuid.uuid4().hex[:6]}"
    try:
        _run("ip", "netns", "add", probe)
    except (RuntimeError, OSError) as exc:
        raise NamespaceUnavailable(f"cannot create a network namespace: {exc}") from None
    _run("ip", "netns", "del", probe)


def free_subnet(low: int = 70, high: int = 250) -> int:
    """A 10.N.0.0/24 no interface of this host uses yet: a network left behind
    by a killed run, or another run at the same time, must not share it (the
    host would route into the wrong bridge)."""
    listing = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=20).stdout
    used = {int(part.split(".")[1]) for part in listing.split() if part.startswith("10.") and part.count(".") == 3}
    for subnet in range(low, high):
        if subnet not in used:
            return subnet
    raise NamespaceUnavailable(f"every subnet 10.{low}-{high - 1}.0.0/24 is in use")


class VirtualNetwork:
    """Hosts ``name -> IP`` on 10.<subnet>.0.0/24 behind one bridge."""

    def __init__(self, hostnames: list[str], subnet: int | None = None):
        self.prefix = f"pb{uuid.uuid4().hex[:5]}"
        self.subnet = subnet if subnet is not None else free_subnet()
        self.switch = f"{self.prefix}-sw"
        self.namespaces: dict[str, str] = {}
        self.ips: dict[str, str] = {name: f"10.{self.subnet}.0.{i + 1}" for i, name in enumerate(hostnames)}
        self.host_ip = f"10.{self.subnet}.0.254"
        self.interfaces: dict[str, str] = {}
        self._made: list[tuple[str, ...]] = []
        try:
            self._build()
        except Exception:
            self.close()
            raise

    def _build(self) -> None:
        _run("ip", "netns", "add", self.switch)
        self._made.append(("netns", self.switch))
        sw = ("ip", "netns", "exec", self.switch)
        _run(*sw, "ip", "link", "add", "br0", "type", "bridge")
        _run(*sw, "ip", "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in self.ips.items())
        for index, (name, ip) in enumerate(self.ips.items()):
            namespace = f"{self.prefix}-{index}"
            self.namespaces[name] = namespace
            _run("ip", "netns", "add", namespace)
            self._made.append(("netns", namespace))
            (ETC_NETNS / namespace).mkdir(parents=True, exist_ok=True)
            self._made.append(("etc", namespace))
            (ETC_NETNS / namespace / "hosts").write_text(hosts)
            outside, inside = f"{self.prefix}o{index}", f"{self.prefix}i{index}"
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            self.interfaces[name] = inside
            _run("ip", "link", "set", outside, "netns", self.switch)
            _run("ip", "link", "set", inside, "netns", namespace)
            _run(*sw, "ip", "link", "set", outside, "master", "br0")
            _run(*sw, "ip", "link", "set", outside, "up")
            run_in = ("ip", "netns", "exec", namespace)
            _run(*run_in, "ip", "link", "set", "lo", "up")
            _run(*run_in, "ip", "addr", "add", f"{ip}/24", "dev", inside)
            _run(*run_in, "ip", "link", "set", inside, "up")
        # The test process (host namespace) joins the bridge too.
        outside, inside = f"{self.prefix}oh", f"{self.prefix}ih"
        _run("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
        self._made.append(("link", inside))
        _run("ip", "link", "set", outside, "netns", self.switch)
        _run(*sw, "ip", "link", "set", outside, "master", "br0")
        _run(*sw, "ip", "link", "set", outside, "up")
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", inside)
        _run("ip", "link", "set", inside, "up")

    def exec_prefix(self, hostname: str) -> list[str]:
        """The command prefix that runs a program on ``hostname``."""
        return ["ip", "netns", "exec", self.namespaces[hostname]]

    # ---------------------------------------------------------------- faults
    # This kernel may lack netfilter and tc's classifiers, so traffic from one
    # host to another is cut where every kernel can: the sender's neighbour
    # table. A permanent entry giving the receiver a MAC nobody owns makes the
    # bridge deliver the sender's frames nowhere, silently, as a broken link
    # would (no error to the sender, TCP retransmits); the other direction
    # keeps working, so both one-way and two-way cuts can be made.

    def block(self, source: str, target: str) -> None:
        """Frames from ``source`` to ``target`` are lost from now on."""
        _run(
            *self.exec_prefix(source),
            "ip",
            "neigh",
            "replace",
            self.ips[target],
            "lladdr",
            UNOWNED_MAC,
            "dev",
            self.interfaces[source],
            "nud",
            "permanent",
        )

    def unblock(self, source: str, target: str) -> None:
        """Undo ``block``: the next frame asks ARP for the real address."""
        subprocess.run(
            [*self.exec_prefix(source), "ip", "neigh", "del", self.ips[target], "dev", self.interfaces[source]],
            capture_output=True,
            timeout=20,
        )

    def _qdisc(self, hostname: str, *args: str) -> subprocess.CompletedProcess:
        """``tc qdisc replace`` on the root of ``hostname``'s link."""
        command = [*self.exec_prefix(hostname), "tc", "qdisc", "replace", "dev", self.interfaces[hostname], "root", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=20)

    def limit_rate(self, hostname: str, rate: str) -> None:
        """Everything ``hostname`` sends queues behind a token bucket of ``rate``
        (tc's ``tbf``, e.g. "1mbit"): a slow link whose queue adds latency."""
        result = self._qdisc(hostname, "tbf", "rate", rate, "burst", "16kb", "latency", "2s")
        if result.returncode != 0:
            raise RuntimeError(f"tc tbf on {hostname}: {result.stderr.strip()}")

    def netem(self, hostname: str, *args: str) -> None:
        """tc netem on ``hostname``'s link (delay, loss); NetemUnavailable where
        the kernel has no sch_netem."""
        result = self._qdisc(hostname, "netem", *args)
        if result.returncode != 0:
            raise NetemUnavailable(result.stderr.strip())

    def clear_qdisc(self, hostname: str) -> None:
        subprocess.run(
            [*self.exec_prefix(hostname), "tc", "qdisc", "del", "dev", self.interfaces[hostname], "root"],
            capture_output=True,
            timeout=20,
        )

    def close(self) -> None:
        for kind, name in reversed(self._made):
            try:
                if kind == "netns":
                    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)
                elif kind == "link":
                    subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=20)
                elif kind == "etc":
                    shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
            except (OSError, subprocess.TimeoutExpired):
                pass  # best effort: the rest must still go
        self._made.clear()
