"""Running host commands: one place that logs, checks and captures."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

log = logging.getLogger("specfleet_lab")


class LabError(RuntimeError):
    """A lab step failed; the message says which command and why."""


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv (never through a shell) and return the completed process."""
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    log.debug("run: %s", " ".join(argv))
    proc = subprocess.run(
        list(argv),
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise LabError(
            f"command failed ({proc.returncode}): {' '.join(argv)}\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def ok(argv: Sequence[str], **kwargs: object) -> bool:
    """True when argv exits 0 (errors are expected and not raised)."""
    return run(argv, check=False, **kwargs).returncode == 0  # type: ignore[arg-type]


def mounts_under(path: str) -> list[str]:
    """Mount points at or below path (deepest first), from /proc/self/mounts."""
    root = os.path.realpath(path)
    found = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            target = line.split()[1].replace("\\040", " ")
            if target == root or target.startswith(root + "/"):
                found.append(target)
    return sorted(set(found), key=len, reverse=True)


def safe_rmtree(path: str) -> None:
    """rm -rf a build directory, but never through a mount (e.g. a chroot's /proc left
    behind by a failed debootstrap): unmount what is below it first, and refuse if that
    fails."""
    for target in mounts_under(path):
        run(["umount", "-l", target], check=False)
    left = mounts_under(path)
    if left:
        raise LabError(f"refusing to delete {path}: still mounted: {', '.join(left)}")
    shutil.rmtree(path, ignore_errors=True)
