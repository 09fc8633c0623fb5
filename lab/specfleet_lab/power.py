"""The power management of an emulated Jetson: nvpmodel's configuration and the commands.

A Jetson kind's `power` block in lab/profiles/kinds.yml (modes, the mode a flashed unit
starts in, emulated clock ranges) becomes
  * /etc/nvpmodel.conf in nvpmodel's own format (PARAM, POWER_MODEL and PM_CONFIG
    blocks), which the toolkit reads on a unit as it would on a real one;
  * /etc/specfleet-lab/jetson-clocks.json (lab-only): what sysfs would say about the
    clocks (CPU count, min/max frequencies), for `jetson_clocks --show`;
  * links /usr/sbin/nvpmodel and /usr/bin/jetson_clocks to the stand-in both unit images
    carry (lab/images/unit/rootfs/usr/lib/specfleet-lab/specfleet-lab-jetson-power).
The links come with the identity, not with the image: a DGX Spark (no `power`) is not a
Jetson and has neither command, as on a real one; a unit image serves every kind.

The stand-in keeps the state (mode persistent, clock pinning not) and writes
/etc/specfleet-lab/power/power.json, which the emulated nvidia-container-runtime shows
GPU containers and the vLLM emulator paces its steps by.
"""

from __future__ import annotations

import json
from typing import Any

from specfleet_lab.profiles import Unit

STAND_IN = "/usr/lib/specfleet-lab/specfleet-lab-jetson-power"
NVPMODEL = "/usr/sbin/nvpmodel"
JETSON_CLOCKS = "/usr/bin/jetson_clocks"
NVPMODEL_CONF = "/etc/nvpmodel.conf"
HARDWARE_FILE = "/etc/specfleet-lab/jetson-clocks.json"
POWER_FILE = "/etc/specfleet-lab/power/power.json"

CLOCK_KEYS = (
    "soc_family", "cpu_count", "cpu_param", "cpu_min_khz", "cpu_max_khz", "gpu_min_hz", "gpu_max_hz",
    "gpu_tpcs", "gpu_devfreq", "emc_min_hz", "emc_max_hz",
)
MODE_KEYS = ("id", "name", "cpus", "cpu_max_khz", "gpu_max_hz", "emc_max_hz")


def power_spec(kind: dict[str, Any]) -> dict[str, Any] | None:
    """The kind's validated `power` block, or None (not a Jetson). Raises ValueError."""
    spec = kind.get("power")
    if spec is None:
        return None
    clocks = spec.get("clocks") or {}
    missing = [key for key in CLOCK_KEYS if key not in clocks]
    if missing:
        raise ValueError(f"power.clocks lacks {', '.join(missing)}")
    modes = spec.get("modes") or []
    ids = [mode.get("id") for mode in modes]
    if not modes or len(set(ids)) != len(ids):
        raise ValueError("power.modes must list modes with distinct ids")
    for mode in modes:
        lacking = [key for key in MODE_KEYS if key not in mode]
        if lacking:
            raise ValueError(f"power mode {mode.get('name')!r} lacks {', '.join(lacking)}")
        if not 0 < int(mode["cpus"]) <= int(clocks["cpu_count"]):
            raise ValueError(f"power mode {mode['name']}: cpus outside 1..{clocks['cpu_count']}")
        if int(mode["gpu_max_hz"]) > int(clocks["gpu_max_hz"]):
            raise ValueError(f"power mode {mode['name']}: GPU above the hardware maximum")
    if spec.get("default_mode") not in ids:
        raise ValueError("power.default_mode must be one of the modes' ids")
    if not any(str(mode["name"]).upper().startswith("MAXN") for mode in modes):
        raise ValueError("power.modes need a MAXN* mode (the maximum-performance mode)")
    return dict(spec)


def _limit(value: int, hardware_max: int) -> int:
    return hardware_max if value <= 0 else value


def gpu_max_hz(spec: dict[str, Any], mode_id: int) -> int:
    """A mode's GPU ceiling in Hz (-1 in the data: the hardware maximum)."""
    mode = next(m for m in spec["modes"] if m["id"] == mode_id)
    return _limit(int(mode["gpu_max_hz"]), int(spec["clocks"]["gpu_max_hz"]))


def maxn_mode(spec: dict[str, Any]) -> dict[str, Any]:
    """The first MAXN* mode (MAXN, MAXN_SUPER): what the toolkit switches to."""
    named = sorted((m for m in spec["modes"] if str(m["name"]).upper().startswith("MAXN")), key=lambda m: m["id"])
    return dict(named[0])


def nvpmodel_conf(unit: Unit) -> str:
    """/etc/nvpmodel.conf for the unit's kind, in nvpmodel's format."""
    spec = power_spec(unit.kind)
    assert spec is not None, f"{unit.kind_id} is not a Jetson"
    clocks = spec["clocks"]
    cpus = int(clocks["cpu_count"])
    cpu_param = clocks["cpu_param"]
    devfreq = clocks["gpu_devfreq"]
    lines = [
        f"# /etc/nvpmodel.conf of a specfleet lab EMULATED Jetson ({unit.kind.get('sku', unit.kind_id)}).",
        "# Written by the lab (lab/specfleet_lab/power.py from lab/profiles/kinds.yml); not NVIDIA's",
        "# file. nvpmodel's format; the names, ids and MAXN follow NVIDIA's Jetson Linux Developer",
        "# Guide (Platform Power and Performance), limits marked plausible there are lab values.",
        "# Read by the lab's EMULATED nvpmodel and jetson_clocks: there are no clocks to set here.",
        "",
        "< PARAM TYPE=FILE NAME=CPU_ONLINE >",
        *(f"CORE_{i} /sys/devices/system/cpu/cpu{i}/online" for i in range(cpus)),
        "",
        f"< PARAM TYPE=CLOCK NAME={cpu_param} >",
        "FREQ_TABLE /sys/devices/system/cpu/cpu0/cpufreq/scaling_available_frequencies",
        "MAX_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
        "MIN_FREQ /sys/devices/system/cpu/cpu0/cpufreq/scaling_min_freq",
        "",
        "< PARAM TYPE=CLOCK NAME=GPU >",
        f"FREQ_TABLE {devfreq}/available_frequencies",
        f"MAX_FREQ {devfreq}/max_freq",
        f"MIN_FREQ {devfreq}/min_freq",
        "",
        "< PARAM TYPE=CLOCK NAME=EMC >",
        "MAX_FREQ /sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
    ]
    for mode in sorted(spec["modes"], key=lambda m: m["id"]):
        lines += ["", f"< POWER_MODEL ID={mode['id']} NAME={mode['name']} >"]
        lines += [f"CPU_ONLINE CORE_{i} {int(i < int(mode['cpus']))}" for i in range(cpus)]
        lines += [
            f"{cpu_param} MIN_FREQ {clocks['cpu_min_khz']}",
            f"{cpu_param} MAX_FREQ {mode['cpu_max_khz']}",
            "GPU MIN_FREQ 0",
            f"GPU MAX_FREQ {mode['gpu_max_hz']}",
            f"EMC MAX_FREQ {mode['emc_max_hz']}",
        ]
    lines += ["", "# mandatory section to configure the default mode", f"< PM_CONFIG DEFAULT={spec['default_mode']} >"]
    lines.append("")
    return "\n".join(lines)


def hardware_json(unit: Unit) -> dict[str, Any]:
    """The lab-only clock ranges sysfs would show (read by the stand-in's jetson_clocks)."""
    spec = power_spec(unit.kind)
    assert spec is not None, f"{unit.kind_id} is not a Jetson"
    return {
        "emulated": True,
        "comment": "specfleet lab: the clock ranges of this EMULATED Jetson (what sysfs would show)",
        "machine": unit.kind["model"],
        **{key: spec["clocks"][key] for key in CLOCK_KEYS if key not in ("cpu_param", "gpu_devfreq")},
    }


def identity_files(unit: Unit) -> dict[str, bytes]:
    """The power files of a Jetson unit (none for other kinds): absolute path -> content."""
    if power_spec(unit.kind) is None:
        return {}
    return {
        NVPMODEL_CONF: nvpmodel_conf(unit).encode(),
        HARDWARE_FILE: (json.dumps(hardware_json(unit), indent=2) + "\n").encode(),
    }


def command_links(unit: Unit) -> dict[str, str]:
    """Symlinks of a Jetson unit: real command path -> the stand-in in the image."""
    if power_spec(unit.kind) is None:
        return {}
    return {NVPMODEL: STAND_IN, JETSON_CLOCKS: STAND_IN}
