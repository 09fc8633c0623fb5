"""Helpers shared by the lab tests (a plain module: `conftest` names are ambiguous when
several test directories have one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from specfleet_lab.config import LabConfig  # noqa: E402


def snapshot() -> dict[str, set[str]]:
    """What the host looks like, in the terms `lab down` promises to restore."""
    cfg = LabConfig()

    def lines(argv: list[str]) -> set[str]:
        return set(subprocess.run(argv, capture_output=True, text=True).stdout.splitlines())

    mounts = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()}
    procs = set()
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(k in cmd for k in ("specfleet-lab", "docker-registry", "containerd-shim",
                                  "sshd -D -e")):
            procs.add(f"{pid_dir.name} {cmd.strip()}")
    containers_dir = cfg.docker_data_root / "containers"
    return {
        "netns": lines(["ip", "netns", "list"]),
        "links": {line.split()[0] for line in lines(["ip", "-br", "link"]) if line.strip()},
        "mounts": mounts,
        "processes": procs,
        "iptables": lines(["iptables", "-S"]),
        "containers": set(os.listdir(containers_dir)) if containers_dir.exists() else set(),
        "cgroups": {str(p) for p in Path("/sys/fs/cgroup").glob("*/specfleet-lab")},
    }


def ssh_argv(cfg: LabConfig, address: str, command: str) -> list[str]:
    return [
        "ssh", "-i", str(cfg.ssh_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
        f"root@{address}", command,
    ]


def ssh(cfg: LabConfig, address: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(ssh_argv(cfg, address, command), capture_output=True, text=True,
                          timeout=timeout)
