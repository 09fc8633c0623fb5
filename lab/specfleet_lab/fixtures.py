"""The emulated identity of a unit (a Jetson, or a DGX Spark), as files.

A unit's facts module is pointed at FIXTURE_ROOT (inventory var specfleet_facts_root)
and reads these files exactly as it reads /etc/nv_tegra_release, /proc/device-tree/*
and /proc/meminfo on a real Jetson, including the NUL bytes of the device-tree files, or
/etc/dgx-release, the DMI product name and the driver banner on a DGX Spark.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from typing import Any

from specfleet_lab import power
from specfleet_lab.profiles import Unit

FIXTURE_ROOT = "/opt/specfleet-lab/jetson"
GPU_FILE = "/etc/specfleet-lab/gpu.json"


def meminfo(mem_total_kb: int) -> str:
    """A /proc/meminfo with the unit's MemTotal; the rest is a plausible idle unit."""
    free = int(mem_total_kb * 0.86)
    available = int(mem_total_kb * 0.92)
    cached = int(mem_total_kb * 0.05)
    rows = [
        ("MemTotal", mem_total_kb),
        ("MemFree", free),
        ("MemAvailable", available),
        ("Buffers", int(mem_total_kb * 0.004)),
        ("Cached", cached),
        ("SwapCached", 0),
        ("SwapTotal", 0),
        ("SwapFree", 0),
        ("Shmem", int(mem_total_kb * 0.002)),
        ("CmaTotal", 524288),
        ("CmaFree", 521216),
    ]
    return "".join(f"{key + ':':<16}{value:>8} kB\n" for key, value in rows)


def gpu_json(unit: Unit) -> dict[str, Any]:
    kind = unit.kind
    return {
        "device_class": unit.device_class,
        "gpu_name": kind["gpu_name"],
        # Jetson memory is unified: the GPU can use all of MemTotal.
        "memory_total_mib": int(kind["mem_total_kb"]) // 1024,
        "memory_bandwidth_gbps": kind["memory_bandwidth_gbps"],
        # A string ("8.7"), as nvidia-smi prints it; the emulator refuses a number.
        "compute_capability": kind["compute_capability"],
        "emulated": True,
    }


def identity_files(unit: Unit) -> dict[str, bytes]:
    """Absolute path inside the unit -> content."""
    kind = unit.kind
    root = FIXTURE_ROOT
    files = {
        f"{root}/proc/meminfo": meminfo(int(kind["mem_total_kb"])).encode(),
        GPU_FILE: (json.dumps(gpu_json(unit), indent=2) + "\n").encode(),
    }
    if "dgx_release" in kind:
        # DGX OS: no L4T release file and no device tree.
        files.update({
            f"{root}/etc/dgx-release": ("\n".join(kind["dgx_release"]) + "\n").encode(),
            f"{root}/sys/class/dmi/id/product_name": (kind["dmi_product_name"] + "\n").encode(),
            f"{root}/proc/driver/nvidia/version": ("\n".join(kind["nvidia_driver"]) + "\n").encode(),
            f"{root}/EMULATED": (
                f"specfleet lab fixture: {unit.name} emulates a {kind.get('sku', unit.kind_id)} "
                "on DGX OS. Not a real DGX Spark.\n"
            ).encode(),
        })
        return files
    files.update({
        f"{root}/etc/nv_tegra_release": ("\n".join(kind["nv_tegra_release"]) + "\n").encode(),
        # Device-tree strings are NUL-terminated; `compatible` is a NUL-separated list.
        f"{root}/proc/device-tree/model": kind["model"].encode() + b"\0",
        f"{root}/proc/device-tree/compatible": b"".join(
            c.encode() + b"\0" for c in kind["compatible"]
        ),
        f"{root}/EMULATED": (
            f"specfleet lab fixture: {unit.name} emulates {kind.get('sku', unit.kind_id)} "
            f"on L4T {kind['l4t']} (JetPack {kind['jetpack']}). Not a real Jetson.\n"
        ).encode(),
    })
    # nvpmodel's conf and the emulated clock ranges (lab/specfleet_lab/power.py).
    files.update(power.identity_files(unit))
    return files


@dataclass(frozen=True)
class Login:
    """Who the controller's lab key logs in as on a unit."""

    user: str
    uid: int
    gid: int
    home: str
    # Mode of the home directory in the tar (it replaces the image's).
    home_mode: int


# Root-login units (every profile until issue 16): root with the controller's key.
ROOT_LOGIN = Login("root", 0, 0, "/root", 0o700)
# Stock units: JetPack's first user (lab/images/unit-stock/Dockerfile makes it, uid 1000).
# Home 0750 as Ubuntu makes it.
STOCK_LOGIN = Login("nvidia", 1000, 1000, "/home/nvidia", 0o750)


def unit_tar(
    unit: Unit,
    authorized_key: str,
    extra: dict[str, bytes] | None = None,
    login: Login = ROOT_LOGIN,
    private: set[str] | frozenset[str] = frozenset(),
) -> bytes:
    """A tar (for `docker cp -a - CONTAINER:/`) with the unit's identity, SSH access for
    `login` and `extra` files (absolute path -> content, e.g. the registry CA and the
    unit's host keys; paths in `private` get mode 0600). Entries at or under the login's
    home belong to the login (sshd reads authorized_keys as that user). A Jetson's tar also
    links nvpmodel and jetson_clocks to the image's stand-in (power.command_links)."""
    files = identity_files(unit)
    files[f"{login.home}/.ssh/authorized_keys"] = authorized_key.strip().encode() + b"\n"
    files.update(extra or {})
    ssh_dir = f"{login.home}/.ssh"

    def owner(path: str) -> tuple[int, int]:
        if path == login.home or path.startswith(login.home + "/"):
            return login.uid, login.gid
        return 0, 0

    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/"))})
        for directory in dirs:
            if not directory:
                continue
            info = tarfile.TarInfo(directory.lstrip("/"))
            info.type = tarfile.DIRTYPE
            info.mtime = now
            if directory == login.home:
                info.mode = login.home_mode
            elif directory == ssh_dir:
                info.mode = 0o700
            else:
                info.mode = 0o755
            info.uid, info.gid = owner(directory)
            tar.addfile(info)
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mtime = now
            info.mode = 0o600 if path.startswith(ssh_dir + "/") or path in private else 0o644
            info.uid, info.gid = owner(path)
            tar.addfile(info, io.BytesIO(content))
        # Their directories (/usr/sbin, /usr/bin) are the image's: no entries for them.
        for path, target in power.command_links(unit).items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname, info.mtime, info.mode = tarfile.SYMTYPE, target, now, 0o777
            tar.addfile(info)
    return buf.getvalue()


def files_tar(files: dict[str, bytes], private: set[str] | frozenset[str] = frozenset()) -> bytes:
    """A tar of root-owned files (absolute path -> content) for `docker cp -a - C:/`:
    directories 0755, paths in `private` 0600, the rest 0644."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for directory in sorted({p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/"))}):
            if directory:
                info = tarfile.TarInfo(directory.lstrip("/"))
                info.type, info.mtime, info.mode = tarfile.DIRTYPE, now, 0o755
                tar.addfile(info)
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mtime, info.mode = len(content), now, 0o600 if path in private else 0o644
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()
