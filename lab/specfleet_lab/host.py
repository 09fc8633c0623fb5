"""Host preparation: the Debian packages the lab runs on."""

from __future__ import annotations

import os
from pathlib import Path

from specfleet_lab.sh import LabError, log, run

# Debian package -> why the lab needs it.
HOST_PACKAGES: dict[str, str] = {
    "docker.io": "the lab's own dockerd (and the docker CLI)",
    "debootstrap": "builds the bookworm/trixie rootfs the images start from",
    "iproute2": "network namespaces, veths, bridge, tc",
    "openssh-client": "ssh to units; ssh-keygen for the controller key",
    "rsync": "what the toolkit uses to copy model caches",
    "docker-registry": "the LAN registry (distribution 2.8) serving engine images",
    "chromium": "renders the fleet report headless in its visual test",
    "fonts-dejavu-core": "the fonts that rendering uses",
}

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def missing_packages(names: list[str] | None = None) -> list[str]:
    """Packages from HOST_PACKAGES (or names) not installed on this host."""
    wanted = names or list(HOST_PACKAGES)
    missing = []
    for name in wanted:
        proc = run(["dpkg-query", "-W", "-f=${Status}", name], check=False)
        if "install ok installed" not in proc.stdout:
            missing.append(name)
    return missing


def ensure_host_packages(names: list[str] | None = None) -> list[str]:
    """Install what is missing with apt-get; return what was installed.

    Package scripts must not start Debian's own docker or registry services: those would
    listen on the default socket / port 5000 and add iptables rules, i.e. touch the host
    beyond the lab. A policy-rc.d returning 101 forbids service starts during the install;
    we add one only if the host has none and remove exactly that file afterwards.
    """
    missing = missing_packages(names)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise LabError(f"need root to install {' '.join(missing)}")
    log.info("installing host packages: %s", " ".join(missing))
    added_policy = False
    if not POLICY_RC_D.exists():
        POLICY_RC_D.write_text("#!/bin/sh\n# specfleet lab: no service starts during install\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
        added_policy = True
    try:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        run(["apt-get", "update"], env=env, timeout=600)
        run(
            ["apt-get", "install", "-y", "--no-install-recommends", *missing],
            env=env,
            timeout=1800,
        )
    finally:
        if added_policy:
            POLICY_RC_D.unlink(missing_ok=True)
    still = missing_packages(names)
    if still:
        raise LabError(f"packages still missing after install: {' '.join(still)}")
    return missing
