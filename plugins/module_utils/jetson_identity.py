# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Identify a Jetson unit (or a DGX Spark) from the files it exposes.

Unit-side code: standard library only (a Jetson promises python3, nothing more). The
Ansible module ``jetson_facts`` and the controller command ``specfleet facts --root`` both
call :func:`identify`, so both print the same facts for the same files.

Sources for every table below: rbonghi/jetson_stats (``jtop/core/jetson_variables.py``,
``jtop/core/hw_detect.py``), dusty-nv/jetson-containers (``jetson_containers/l4t_version.py``)
and NVIDIA-AI-IOT/jetson-device-skills (``skills/jetson-diagnostic/scripts/detect_jetson.sh``).
DGX Spark: see the comments at DGX_SPARK_*.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

DGX_SPARK = "dgx_spark"
UNKNOWN_CLASS = "unknown"

DEFAULT_PATHS = {
    "nv_tegra_release": "/etc/nv_tegra_release",
    "model": "/proc/device-tree/model",
    "compatible": "/proc/device-tree/compatible",
    "meminfo": "/proc/meminfo",
    # DGX OS release file: DGX_NAME="DGX Spark", DGX_SWBUILD_VERSION, DGX_OTA_VERSION lines.
    "dgx_release": "/etc/dgx-release",
    # SMBIOS product name: "NVIDIA_DGX_Spark" on NVIDIA's own unit, the OEM's name otherwise.
    "dmi_product_name": "/sys/class/dmi/id/product_name",
    # Kernel module banner; its version gives the CUDA the driver can run (no L4T table here).
    "nvidia_driver": "/proc/driver/nvidia/version",
}

# Line 1 of /etc/nv_tegra_release: "# R36 (release), REVISION: 4.3, GCID: ...".
# Tolerant on purpose: carrier-board images vary the rest of the line.
_RELEASE_RE = re.compile(r"R(\d+)\b.*?REVISION:\s*(\d+)\.(\d+)")
_DPKG_L4T_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_MEMTOTAL_RE = re.compile(r"^MemTotal:\s+(\d+)\s*kB", re.MULTILINE)
_PNUMBER_RE = re.compile(r"p(\d{4})-(\d{4})")

# L4T release -> JetPack. Exact entries; a patch release missing here takes the newest
# listed release of the same major.minor with a lower patch (36.4.8 -> 36.4.7 -> 6.2.1).
# Where jtop and jetson-containers disagree (36.4.2, 36.5.0) jtop's newer table wins.
JETPACK_BY_L4T = {
    "35.2.1": "5.1",
    "35.3.1": "5.1.1",
    "35.4.1": "5.1.2",
    "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "35.6.1": "5.1.5",
    "35.6.2": "5.1.5",
    "35.6.3": "5.1.5",
    "35.6.4": "5.1.6",
    "36.2.0": "6.0 DP",
    "36.3.0": "6.0",
    "36.4.0": "6.1",
    "36.4.2": "6.1",
    "36.4.3": "6.2",
    "36.4.4": "6.2.1",
    "36.4.7": "6.2.1",
    "36.5.0": "6.2.2",
    "38.1.0": "7.0 EA",
    "38.2.0": "7.0",
    "38.2.1": "7.0",
    "38.2.2": "7.0",
    "38.4.0": "7.1",
    "39.0.0": "7.2 EA",
    "39.1.0": "7.2",
    "39.2.0": "7.2",
    "39.2.1": "7.2.1",
}

# CUDA shipped by an L4T series (jetson-containers get_cuda_version; JP5 from the CUDA
# compat blog). Keyed by (major, minor) first, then major.
CUDA_BY_L4T_SERIES = {(36, 2): "12.2", (36, 3): "12.4", (36, 4): "12.6", (36, 5): "12.6"}
CUDA_BY_L4T_MAJOR = {35: "11.4", 38: "13.0", 39: "13.2"}

# Module P-number -> (device class, module name) (jetson_stats MODULE_NAME_TABLE).
MODULES = {
    "p3834-0008": ("thor", "Jetson AGX Thor (T5000)"),
    "p3701-0005": ("agx_orin", "Jetson AGX Orin 64GB"),
    "p3701-0004": ("agx_orin", "Jetson AGX Orin 32GB"),
    "p3701-0000": ("agx_orin", "Jetson AGX Orin"),
    "p3767-0000": ("orin_nx", "Jetson Orin NX 16GB"),
    "p3767-0001": ("orin_nx", "Jetson Orin NX 8GB"),
    "p3767-0003": ("orin_nano", "Jetson Orin Nano 8GB"),
    "p3767-0004": ("orin_nano", "Jetson Orin Nano 4GB"),
    "p3767-0005": ("orin_nano", "Jetson Orin Nano (devkit)"),
}
# A module family decides the class even for P-number SKUs missing from MODULES.
CLASS_BY_MODULE_FAMILY = {"p3834": "thor", "p3701": "agx_orin"}

# Substrings of the device-tree model, most specific first: third-party carriers use
# vendor strings, so classify by substring rather than by the full devkit name.
CLASS_BY_MODEL_SUBSTRING = (
    ("thor", "thor"),
    ("agx orin", "agx_orin"),
    ("orin nx", "orin_nx"),
    ("orin nano", "orin_nano"),
)

# Every key the facts of a unit carry (identify_unit's and _dgx_spark_facts'), and the host
# name `specfleet facts` and the plan play add: what a declaration may name.
FACT_KEYS = (
    "is_jetson", "device_class", "model", "compatible", "sku", "module", "memory_mb", "l4t", "l4t_source",
    "jetpack", "cuda", "product_name", "dgx_os", "dgx_platform", "dgx_release_source", "nvidia_driver", "host",
)

# When no P-number names the module, MemTotal buckets do (detect_jetson.sh), in GiB.
MEMORY_BUCKETS_GIB = {
    "thor": ((96, "Jetson AGX Thor (T5000)"), (32, "Jetson AGX Thor (T4000)")),
    "agx_orin": ((56, "Jetson AGX Orin 64GB"), (28, "Jetson AGX Orin 32GB")),
    "orin_nx": ((14, "Jetson Orin NX 16GB"), (7, "Jetson Orin NX 8GB")),
    "orin_nano": ((7, "Jetson Orin Nano 8GB"), (3, "Jetson Orin Nano 4GB")),
}


# --- DGX Spark (GB10 Grace Blackwell, 128 GB unified memory, DGX OS = Ubuntu 24.04) ---
# Sources (public code, found by code search; facts only):
#   - /etc/dgx-release on a Spark holds DGX_NAME="DGX Spark", DGX_PRETTY_NAME="NVIDIA DGX
#     Spark", DGX_SWBUILD_VERSION="7.2.3", DGX_PLATFORM (the OEM box, e.g. "GX10" on an ASUS
#     Ascent GX10, "HP ZGX Nano G1n AI Station"), then one DGX_OTA_VERSION/DGX_OTA_DATE pair
#     per over-the-air update (7.3.1, 7.4.0, ...; the last one is what runs), and
#     DGX_SERIAL_NUMBER, which this module never returns. Some OEM files are unquoted.
#     Several Spark tools detect the unit by DGX_NAME="DGX Spark" in this file.
#   - DMI product_name: "NVIDIA_DGX_Spark" (NVIDIA's Founders Edition, sys_vendor NVIDIA),
#     "GX10" (ASUS), "Dell Pro Max with GB10 FCM1253" (Dell): a fallback when DGX OS is
#     absent (another Ubuntu on the same box).
#   - /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64
#     580.95.05  Release Build ..."; nvidia-smi on a Spark prints "NVIDIA GB10 ... Driver
#     Version: 580.95.05  CUDA Version: 13.0"; MemTotal 127535084 kB (121.6 GiB).
_DGX_RELEASE_LINE_RE = re.compile(r'^\s*(DGX_[A-Z_]+)\s*=\s*"?([^"\n]*?)"?\s*$', re.MULTILINE)
_DRIVER_RE = re.compile(r"Kernel Module(?: for \w+)?\s+(\d+)\.(\d+)(?:\.(\d+))?")
# DGX_NAME values that mean a DGX Spark (compared case-insensitively).
DGX_SPARK_NAMES = ("dgx spark",)
# Substrings of the DMI product name that identify a GB10 system without DGX OS.
DGX_SPARK_PRODUCT_SUBSTRINGS = ("dgx_spark", "dgx spark", "gb10", "gx10")
# The lowest driver branch -> the CUDA it runs (at least): a newer driver runs older CUDA,
# so a later branch keeps the floor of the highest branch listed below it.
CUDA_BY_DRIVER_BRANCH = ((580, "13.0"),)
DGX_SPARK_MODULE = "NVIDIA GB10 Grace Blackwell"


class IdentityError(Exception):
    """A file that exists (or must exist) could not be read or parsed.

    The message always names the file, so a user sees which fixture or unit file is wrong.
    """


@dataclass(frozen=True)
class UnitFiles:
    """The raw contents read from a unit; ``None`` means the file does not exist."""

    nv_tegra_release: str | None
    model: str | None
    compatible: str | None
    meminfo: str | None
    paths: dict[str, str]
    dgx_release: str | None = None
    dmi_product_name: str | None = None
    nvidia_driver: str | None = None


def paths_under(root: str, overrides: dict[str, str | None] | None = None) -> dict[str, str]:
    """Resolve every identity file below ``root`` ("/" on a real unit)."""
    resolved = {}
    for key, default in DEFAULT_PATHS.items():
        path = (overrides or {}).get(key) or default
        resolved[key] = os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path
    return resolved


def read_files(paths: dict[str, str]) -> UnitFiles:
    contents: dict[str, str | None] = {}
    for key, path in paths.items():
        try:
            with open(path, "rb") as handle:
                contents[key] = handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            contents[key] = None
        except OSError as exc:
            raise IdentityError(f"{path}: cannot read ({exc.strerror})") from exc
    return UnitFiles(paths=paths, **contents)


def parse_l4t_release(text: str, path: str) -> str:
    """Return "36.4.3" from the first line of nv_tegra_release."""
    first_line = text.splitlines()[0] if text.strip() else ""
    match = _RELEASE_RE.search(first_line)
    if not match:
        raise IdentityError(
            f"{path}: line 1 is not an L4T release line "
            f"(expected '# R<major> (release), REVISION: <minor>.<patch>, ...', got {first_line!r})"
        )
    major, minor, patch = match.groups()
    return f"{int(major)}.{int(minor)}.{int(patch)}"


def parse_l4t_from_dpkg(version: str) -> str | None:
    """Return "36.4.3" from nvidia-l4t-core's package version "36.4.3-20250107174145"."""
    match = _DPKG_L4T_RE.match(version.strip())
    return ".".join(str(int(part)) for part in match.groups()) if match else None


def parse_memory_mb(text: str, path: str) -> int:
    match = _MEMTOTAL_RE.search(text)
    if not match:
        raise IdentityError(f"{path}: no 'MemTotal: <n> kB' line")
    return int(match.group(1)) // 1024


def device_tree_strings(text: str | None) -> list[str]:
    """Device-tree strings are NUL-terminated (and NUL-separated in ``compatible``)."""
    if text is None:
        return []
    return [part.strip() for part in text.split("\0") if part.strip()]


def module_sku(compatible: list[str]) -> str | None:
    """The module P-number: the part after '+' in 'nvidia,p3737-0000+p3701-0005'."""
    for entry in compatible:
        numbers = _PNUMBER_RE.findall(entry)
        if len(numbers) >= 2:
            return "p{}-{}".format(*numbers[-1])
    # Some units list the module alone ("nvidia,p3834-0008"); a bare carrier P-number is
    # indistinguishable from a module there, so only accept families we know are modules.
    for entry in compatible:
        for family, number in _PNUMBER_RE.findall(entry):
            sku = f"p{family}-{number}"
            if sku in MODULES or f"p{family}" in CLASS_BY_MODULE_FAMILY:
                return sku
    return None


def classify(model: str | None, sku: str | None) -> str:
    lowered = (model or "").lower()
    for needle, device_class in CLASS_BY_MODEL_SUBSTRING:
        if needle in lowered:
            return device_class
    if sku in MODULES:
        return MODULES[sku][0]
    if sku:
        return CLASS_BY_MODULE_FAMILY.get(sku.split("-")[0], UNKNOWN_CLASS)
    return UNKNOWN_CLASS


def module_name(device_class: str, sku: str | None, memory_mb: int) -> str | None:
    if sku in MODULES:
        return MODULES[sku][1]
    for min_gib, name in MEMORY_BUCKETS_GIB.get(device_class, ()):
        if memory_mb >= min_gib * 1024:
            return name
    return None


def parse_dgx_release(text: str | None) -> dict[str, str]:
    """DGX_* keys of /etc/dgx-release (quoted or not). A repeated key keeps its last value,
    which for DGX_OTA_VERSION is the update that runs now. The serial number is dropped:
    the file is world-readable but the serial must not reach facts or reports."""
    if text is None:
        return {}
    values = {key: value.strip() for key, value in _DGX_RELEASE_LINE_RE.findall(text)}
    values.pop("DGX_SERIAL_NUMBER", None)
    return values


def parse_driver_version(text: str | None) -> str | None:
    """"580.95.05" from the /proc/driver/nvidia/version banner (first line)."""
    if not text:
        return None
    match = _DRIVER_RE.search(text.splitlines()[0])
    return ".".join(part for part in match.groups() if part is not None) if match else None


def cuda_for_driver(driver: str | None) -> str | None:
    if not driver:
        return None
    branch = int(driver.split(".")[0])
    floors = [cuda for minimum, cuda in CUDA_BY_DRIVER_BRANCH if branch >= minimum]
    return floors[-1] if floors else None


def is_dgx_spark(dgx_release: dict[str, str], product_name: str | None) -> bool:
    if dgx_release.get("DGX_NAME", "").strip().lower() in DGX_SPARK_NAMES:
        return True
    lowered = (product_name or "").lower()
    return any(needle in lowered for needle in DGX_SPARK_PRODUCT_SUBSTRINGS)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def jetpack_for(l4t: str | None) -> str | None:
    if l4t is None:
        return None
    if l4t in JETPACK_BY_L4T:
        return JETPACK_BY_L4T[l4t]
    major, minor, patch = _version_key(l4t)
    same_series = [
        known
        for known in JETPACK_BY_L4T
        if _version_key(known)[:2] == (major, minor) and _version_key(known)[2] <= patch
    ]
    return JETPACK_BY_L4T[max(same_series, key=_version_key)] if same_series else None


def cuda_for(l4t: str | None) -> str | None:
    if l4t is None:
        return None
    major, minor, _ = _version_key(l4t)
    return CUDA_BY_L4T_SERIES.get((major, minor)) or CUDA_BY_L4T_MAJOR.get(major)


def identify(files: UnitFiles, dpkg_l4t_version: str | None = None) -> dict:
    """Facts about the unit: pure, raises IdentityError naming the file at fault."""
    if files.meminfo is None:
        raise IdentityError(f"{files.paths['meminfo']}: missing")
    memory_mb = parse_memory_mb(files.meminfo, files.paths["meminfo"])

    model_strings = device_tree_strings(files.model)
    model = model_strings[0] if model_strings else None
    compatible = device_tree_strings(files.compatible)
    sku = module_sku(compatible)
    device_class = classify(model, sku)
    dgx_release = parse_dgx_release(files.dgx_release)
    product_name = (files.dmi_product_name or "").strip() or None
    driver = parse_driver_version(files.nvidia_driver)
    # Jetson evidence (device tree) wins; only a unit no Jetson rule claims can be a Spark.
    if device_class == UNKNOWN_CLASS and files.nv_tegra_release is None and is_dgx_spark(dgx_release, product_name):
        return _dgx_spark_facts(dgx_release, product_name, driver, memory_mb, files)

    l4t = None
    l4t_source = None
    if files.nv_tegra_release is not None:
        l4t = parse_l4t_release(files.nv_tegra_release, files.paths["nv_tegra_release"])
        l4t_source = files.paths["nv_tegra_release"]
    elif dpkg_l4t_version:
        l4t = parse_l4t_from_dpkg(dpkg_l4t_version)
        l4t_source = "dpkg-query nvidia-l4t-core"

    if device_class != UNKNOWN_CLASS and l4t is None:
        raise IdentityError(
            f"{files.paths['nv_tegra_release']}: missing, and no nvidia-l4t-core package, "
            f"on a unit whose device tree says {model!r}; cannot tell its L4T release"
        )
    if l4t is not None and model is None:
        raise IdentityError(
            f"{files.paths['model']}: missing, but {l4t_source} says this is L4T {l4t}; "
            "a Jetson always has a device-tree model"
        )

    jetson = device_class != UNKNOWN_CLASS
    facts = {
        "is_jetson": jetson,
        "device_class": device_class,
        "model": model,
        "compatible": compatible,
        "sku": sku,
        "module": module_name(device_class, sku, memory_mb) if jetson else None,
        "memory_mb": memory_mb,
        "l4t": l4t,
        "l4t_source": l4t_source,
        "jetpack": jetpack_for(l4t),
        "cuda": cuda_for(l4t),
    }
    # Only a DGX Spark adds its own keys, so a Jetson's facts read exactly as before.
    return facts


def _dgx_spark_facts(
    dgx_release: dict[str, str], product_name: str | None, driver: str | None, memory_mb: int, files: UnitFiles
) -> dict:
    """A DGX Spark's facts: the Jetson keys that do not apply are null (no L4T, JetPack or
    device tree on DGX OS); CUDA comes from the driver branch instead of the L4T table."""
    return {
        "is_jetson": False,
        "device_class": DGX_SPARK,
        "model": dgx_release.get("DGX_PRETTY_NAME") or product_name,
        "compatible": [],
        "sku": None,
        "module": DGX_SPARK_MODULE,
        "memory_mb": memory_mb,
        "l4t": None,
        "l4t_source": None,
        "jetpack": None,
        "cuda": cuda_for_driver(driver),
        "product_name": product_name,
        "dgx_os": dgx_release.get("DGX_OTA_VERSION") or dgx_release.get("DGX_SWBUILD_VERSION"),
        "dgx_platform": dgx_release.get("DGX_PLATFORM"),
        "dgx_release_source": files.paths.get("dgx_release") if files.dgx_release is not None else None,
        "nvidia_driver": driver,
    }


def parse_docker_info(info_json: str | None) -> dict:
    """Docker state from ``docker info --format '{{json .}}'``; None when docker is absent."""
    if info_json is None:
        return {"installed": False, "running": False, "default_runtime": None, "runtimes": []}
    try:
        info = json.loads(info_json)
    except ValueError:
        info = {}
    # `docker info` prints client info even when the daemon is down; ServerErrors says why.
    running = bool(info.get("ServerVersion")) and not info.get("ServerErrors")
    return {
        "installed": True,
        "running": running,
        "default_runtime": info.get("DefaultRuntime") if running else None,
        "runtimes": sorted((info.get("Runtimes") or {}).keys()) if running else [],
        "server_version": info.get("ServerVersion") if running else None,
    }


def read_unit(paths: dict[str, str], dpkg_l4t_version: str | None = None) -> dict:
    return identify(read_files(paths), dpkg_l4t_version)
