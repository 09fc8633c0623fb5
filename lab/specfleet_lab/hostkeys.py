"""Unit SSH host keys that persist: made once per unit NAME under lab/build/host-keys and
installed at every creation of that unit, for every profile.

A real unit keeps its host key across reboots, so a known_hosts entry stays valid; lab
units are recreated on every `lab up` (at recycled addresses), and with fresh keys each time
a checked known_hosts would break on every up. `specfleet lab rekey UNIT` is the one way a
unit's key changes (what a re-flashed unit looks like), so tests can show a changed key is
refused.

    lab/build/host-keys/<unit>/ssh_host_{rsa,ecdsa,ed25519}_key(.pub)   dir 0700, keys 0600
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from specfleet_lab.config import LabConfig
from specfleet_lab.sh import LabError, run

# What `ssh-keygen -A` makes on a Debian/Ubuntu unit.
KEY_TYPES = ("rsa", "ecdsa", "ed25519")
UNIT_SSH_DIR = "/etc/ssh"


def key_name(key_type: str) -> str:
    return f"ssh_host_{key_type}_key"


def unit_dir(cfg: LabConfig, unit: str) -> Path:
    if not unit or "/" in unit or unit.startswith("."):
        raise LabError(f"not a unit name: {unit!r}")
    return cfg.host_keys_dir / unit


def _generate(directory: Path, unit: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    for key_type in KEY_TYPES:
        path = directory / key_name(key_type)
        if path.exists() and path.with_suffix(".pub").exists():
            continue
        path.unlink(missing_ok=True)
        path.with_suffix(".pub").unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", f"root@{unit}", "-f", str(path)])
        path.chmod(0o600)
        path.with_suffix(".pub").chmod(0o600)


def ensure(cfg: LabConfig, unit: str) -> Path:
    """The unit's key directory, with every key type (made once)."""
    cfg.host_keys_dir.mkdir(parents=True, exist_ok=True)
    cfg.host_keys_dir.chmod(0o700)
    directory = unit_dir(cfg, unit)
    _generate(directory, unit)
    return directory


def regenerate(cfg: LabConfig, unit: str) -> Path:
    """New keys for the unit, swapped in whole (the old set stays until the new one exists)."""
    directory = unit_dir(cfg, unit)
    cfg.host_keys_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{unit}-", dir=cfg.host_keys_dir))
    try:
        _generate(scratch / "keys", unit)
        old = scratch / "old"
        if directory.exists():
            directory.rename(old)
        (scratch / "keys").rename(directory)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return directory


def unit_files(cfg: LabConfig, unit: str) -> tuple[dict[str, bytes], set[str]]:
    """The unit's host key files as (path on the unit -> content, private key paths)."""
    directory = ensure(cfg, unit)
    files: dict[str, bytes] = {}
    private: set[str] = set()
    for key_type in KEY_TYPES:
        name = key_name(key_type)
        files[f"{UNIT_SSH_DIR}/{name}"] = (directory / name).read_bytes()
        files[f"{UNIT_SSH_DIR}/{name}.pub"] = (directory / f"{name}.pub").read_bytes()
        private.add(f"{UNIT_SSH_DIR}/{name}")
    return files, private


def public_keys(cfg: LabConfig, unit: str) -> list[str]:
    """`keytype base64` of each persisted key (no comment); [] when the unit has none yet."""
    directory = unit_dir(cfg, unit)
    keys = []
    for key_type in KEY_TYPES:
        pub = directory / f"{key_name(key_type)}.pub"
        if pub.exists():
            parts = pub.read_text().split()
            keys.append(f"{parts[0]} {parts[1]}")
    return keys
