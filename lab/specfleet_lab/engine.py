"""The lab's own Docker engine: Debian's dockerd on a private socket and data root.

The lab never talks to any other Docker engine on the host: every docker call goes through
`docker()` below, which pins DOCKER_HOST to the lab socket and uses Debian's CLI
(/usr/bin/docker), not whatever `docker` happens to be first on PATH.

Measured on this host (Debian 12, kernel 6.18, 2 cores): cgroup v1 (hybrid, cgroupfs
driver, plus a cgroup2 mount at /sys/fs/cgroup/unified); overlay2 on ext4 works for the
outer engine and, on a per-unit volume, for the units' inner engines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from specfleet_lab.config import LabConfig
from specfleet_lab.sh import LabError, log, run

DOCKER_CLI = "/usr/bin/docker"
DOCKERD = "/usr/sbin/dockerd"
# cgroup directory (under every v1 controller) holding the unit containers.
CGROUP_PARENT = "specfleet-lab"


def dockerd_argv(cfg: LabConfig) -> list[str]:
    """Command line of the lab dockerd.

    --bridge=none/--iptables=false/--ip-masq=false: units use `--network none` and the lab
    wires their namespaces itself, so the engine must not add bridges or NAT rules.
    --ip-forward=false: dockerd otherwise sets net.ipv4.ip_forward=1 on the host
    (measured: it did, even with --bridge=none), which would let lab traffic be routed out.
    --cgroup-parent keeps unit cgroups apart from any other engine's `docker/` tree.
    """
    return [
        DOCKERD,
        f"--host={cfg.docker_host}",
        f"--data-root={cfg.docker_data_root}",
        f"--exec-root={cfg.docker_exec_root}",
        f"--pidfile={cfg.docker_pidfile}",
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--storage-driver=overlay2",
        f"--cgroup-parent=/{CGROUP_PARENT}",
    ]


def docker_env(cfg: LabConfig) -> dict[str, str]:
    return {"DOCKER_HOST": cfg.docker_host}


def docker(cfg: LabConfig, args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the Debian docker CLI against the lab engine only."""
    return run([DOCKER_CLI, *args], env=docker_env(cfg), **kwargs)  # type: ignore[arg-type]


def docker_input(cfg: LabConfig, args: Sequence[str], data: bytes) -> None:
    """Run a docker command that reads binary stdin (e.g. `docker cp - C:/`)."""
    proc = subprocess.run(
        [DOCKER_CLI, *args], input=data, capture_output=True, env={**os.environ, **docker_env(cfg)}
    )
    if proc.returncode != 0:
        raise LabError(f"docker {' '.join(args)} failed: {proc.stderr.decode().strip()}")


def process_alive(entry: dict) -> bool:
    """A process the state recorded ({"pid", "match"}) still runs, and is still ours."""
    pid = int(entry.get("pid", 0))
    return pid > 0 and pid_alive(pid) and entry.get("match", "") in " ".join(pid_cmdline(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[-1][:1] != "Z"


def pid_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode() for part in raw.split(b"\0") if part]


def dockerd_pid(cfg: LabConfig) -> int | None:
    """PID of a running lab dockerd (checked by command line, not just the pidfile)."""
    try:
        pid = int(cfg.docker_pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and f"--host={cfg.docker_host}" in pid_cmdline(pid):
        return pid
    return None


def engine_ready(cfg: LabConfig) -> bool:
    return docker(cfg, ["version", "--format", "{{.Server.Version}}"], check=False).returncode == 0


def start_dockerd(cfg: LabConfig, timeout: float = 60.0) -> tuple[int, bool]:
    """Start the lab dockerd unless it runs; return (pid, started_now)."""
    pid = dockerd_pid(cfg)
    if pid:
        # Ours and alive: maybe still starting; never start a second one beside it.
        deadline = time.monotonic() + timeout
        while not engine_ready(cfg):
            if time.monotonic() > deadline or not pid_alive(pid):
                raise LabError(f"lab dockerd (pid {pid}) does not answer; see {cfg.docker_log}")
            time.sleep(0.5)
        return pid, False
    for path in (cfg.run_dir, cfg.docker_data_root, cfg.docker_exec_root):
        path.mkdir(parents=True, exist_ok=True)
    cfg.docker_log.parent.mkdir(parents=True, exist_ok=True)
    with open(cfg.docker_log, "ab") as logf:
        # New session: the engine must outlive this CLI process and not get its signals.
        proc = subprocess.Popen(
            dockerd_argv(cfg),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"lab dockerd exited ({proc.returncode}); see {cfg.docker_log}")
        if engine_ready(cfg):
            log.info("lab dockerd up (pid %d)", proc.pid)
            return proc.pid, True
        time.sleep(0.5)
    raise LabError(f"lab dockerd did not answer within {timeout:.0f}s; see {cfg.docker_log}")


def stop_pid(pid: int, expect_in_cmdline: str, timeout: float = 30.0) -> bool:
    """SIGTERM (then SIGKILL) one process we started, identified by PID.

    The command-line check guards against a recycled PID belonging to something else.
    Returns True when a process was stopped.
    """
    if not pid_alive(pid) or expect_in_cmdline not in " ".join(pid_cmdline(pid)):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    return True
