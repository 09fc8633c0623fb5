"""Lab network: namespaces, one bridge, veths, optional tbf shaping.

    root ns                  sflab-br ns                       unit ns (one per unit)
    sflab0 10.213.77.1/24 -- up0 [br0] sfv10 ---------------- eth0 10.213.77.10/24
                                       sfv11 ---------------- eth0 10.213.77.11/24 ...

Units are started with `--network none` and their namespace gets a name with
`ip netns attach`. No unit namespace has a default route, the controller namespace does
not forward lab traffic (per-interface forwarding off plus a FORWARD drop rule for
sflab0), and there is no NAT: nothing from the lab can leave this host.
Every object is recorded in the state right after it is made (see state.py).
"""

from __future__ import annotations

from pathlib import Path

from specfleet_lab.config import LabConfig
from specfleet_lab.profiles import Unit
from specfleet_lab.sh import log, mounts_under, ok, run
from specfleet_lab.state import LabState

BRIDGE = "br0"
UPLINK = "up0"
NETNS_DIR = Path("/run/netns")


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return run(argv, check=check).stdout


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def link_exists(dev: str, netns: str | None = None) -> bool:
    argv = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", dev]
    return ok(argv)


def _is_mountpoint(path: Path) -> bool:
    return str(path) in mounts_under(str(path))


def _note_netns_dir_mount(state: LabState, was_mountpoint: bool) -> None:
    # iproute2 turns /run/netns into a (shared) mount point the first time it is used;
    # if that first time was ours, the mount is ours to remove at `down`.
    if not was_mountpoint and _is_mountpoint(NETNS_DIR):
        state.add("mounts", str(NETNS_DIR))


def _sysctl(path: str, value: str, netns: str | None = None) -> None:
    if netns:
        run(["ip", "netns", "exec", netns, "sh", "-c", f"echo {value} > /proc/sys/{path}"])
    else:
        Path("/proc/sys", path).write_text(value)


def ensure_bridge(cfg: LabConfig, state: LabState) -> None:
    """The bridge namespace and the controller's one veth into it."""
    ns = cfg.bridge_netns
    was_mountpoint = _is_mountpoint(NETNS_DIR)
    if not netns_exists(ns):
        ip("netns", "add", ns)
        state.add("netns", ns)
    _note_netns_dir_mount(state, was_mountpoint)
    if not link_exists(BRIDGE, ns):
        ip("link", "add", BRIDGE, "type", "bridge", netns=ns)
    ip("link", "set", "lo", "up", netns=ns)
    ip("link", "set", BRIDGE, "up", netns=ns)

    dev = cfg.controller_veth
    if not link_exists(dev):
        ip("link", "add", dev, "type", "veth", "peer", "name", UPLINK, "netns", ns)
        state.add("veths", {"netns": None, "dev": dev})
        # No IPv6 on the lab link: no router solicitations or SLAAC chatter to reason about.
        _sysctl(f"net/ipv6/conf/{dev}/disable_ipv6", "1")
        ip("addr", "add", f"{cfg.controller_address}/{cfg.network.prefixlen}", "dev", dev)
    # Packets arriving on sflab0 are never routed onwards (even if the host forwards).
    _sysctl(f"net/ipv4/conf/{dev}/forwarding", "0")
    ip("link", "set", dev, "up")
    ip("link", "set", UPLINK, "master", BRIDGE, "up", netns=ns)
    _block_forwarding(dev, state)


def _block_forwarding(dev: str, state: LabState) -> None:
    """FORWARD drop for anything entering or leaving via the lab veth (root ns).

    Per-interface forwarding=0 is reset when someone sets net.ipv4.ip_forward=1 (the
    kernel copies `all` to every interface), so a firewall rule backs it up.
    """
    for rule in (["FORWARD", "-i", dev, "-j", "DROP"], ["FORWARD", "-o", dev, "-j", "DROP"]):
        if ok(["iptables", "-C", *rule]):
            continue
        if ok(["iptables", "-I", *rule]):
            state.add("firewall", rule)
        else:
            log.warning("iptables unavailable; relying on %s forwarding=0 only", dev)


def attach_unit(cfg: LabConfig, state: LabState, unit: Unit, pid: int) -> None:
    """Name the unit container's namespace and plug it into the bridge."""
    ns = unit.netns(cfg.prefix)
    if not netns_exists(ns):
        ip("netns", "attach", ns, str(pid))
        state.add("netns", ns)
    port = unit.bridge_port
    if not link_exists(port, cfg.bridge_netns):
        ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
           netns=cfg.bridge_netns)
        state.add("veths", {"netns": cfg.bridge_netns, "dev": port})
    _sysctl("net/ipv6/conf/eth0/disable_ipv6", "1", netns=ns)
    ip("link", "set", port, "master", BRIDGE, "up", netns=cfg.bridge_netns)
    addr = f"{unit.address}/{cfg.network.prefixlen}"
    if addr not in ip("-4", "addr", "show", "dev", "eth0", netns=ns):
        ip("addr", "add", addr, "dev", "eth0", netns=ns)
    ip("link", "set", "eth0", "up", netns=ns)
    ip("link", "set", "lo", "up", netns=ns)


def shape_unit(cfg: LabConfig, state: LabState, unit: Unit, mbit: float) -> None:
    """tbf on both ends of the unit's veth: each end shapes its own egress."""
    rate_bytes = mbit * 1e6 / 8
    # Burst must hold at least one timer tick of traffic or tbf under-delivers.
    burst = max(16 * 1024, int(rate_bytes / 100))
    for ns, dev in ((cfg.bridge_netns, unit.bridge_port), (unit.netns(cfg.prefix), "eth0")):
        run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
             "rate", f"{mbit}mbit", "burst", str(burst), "latency", "50ms"])
        state.add("qdiscs", {"netns": ns, "dev": dev})


def routes_out(netns: str) -> list[str]:
    """Routes in a namespace that lead anywhere but the lab subnet (expected: none)."""
    lines = ip("-4", "route", "show", netns=netns).splitlines()
    return [line for line in lines if line.startswith("default") or " via " in line]


# ---- teardown ------------------------------------------------------------------------
def remove_qdisc(entry: dict) -> None:
    ns, dev = entry.get("netns"), entry["dev"]
    if ns and not netns_exists(ns):
        return  # went away with its namespace
    argv = ["tc"] + (["-n", ns] if ns else []) + ["qdisc", "del", "dev", dev, "root"]
    run(argv, check=False)


def remove_veth(entry: dict) -> None:
    ns, dev = entry.get("netns"), entry["dev"]
    if ns and not netns_exists(ns):
        return
    if link_exists(dev, ns):
        ip("link", "del", dev, netns=ns, check=False)


def remove_netns(name: str) -> None:
    if netns_exists(name):
        ip("netns", "delete", name, check=False)


def remove_firewall_rule(rule: list[str]) -> None:
    while ok(["iptables", "-C", *rule]):
        run(["iptables", "-D", *rule], check=False)


def remove_mount(path: str) -> None:
    """Unmount a mount point the lab made, if nothing else still lives in it."""
    target = Path(path)
    if not _is_mountpoint(target):
        return
    if target == NETNS_DIR and any(target.iterdir()):
        log.info("%s still holds other namespaces; leaving the mount", target)
        return
    run(["umount", str(target)], check=False)

