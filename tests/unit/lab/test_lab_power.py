"""An emulated Jetson's power management: the nvpmodel.conf the fixtures write, the EMULATED
nvpmodel/jetson_clocks (run as subprocesses against a scratch root through
SPECFLEET_LAB_POWER_ROOT), the boot step of the unit's init, the runtime shim's injection of
the power state and the chain to the vLLM emulator's step-time factor. No lab needed."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from specfleet_lab import images, power
from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import identity_files, unit_tar
from specfleet_lab.profiles import Unit, load_kinds

REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "lab" / "images"
STAND_IN = IMAGES / "unit" / "rootfs" / power.STAND_IN.lstrip("/")
INIT = IMAGES / "unit" / "rootfs" / "usr" / "local" / "sbin" / "specfleet-lab-init"
SHIM = IMAGES / "nvidia-container-toolkit" / "files" / "usr" / "bin" / "nvidia-container-runtime"
KINDS = load_kinds(LabConfig().profiles_dir)
JETSONS = sorted(k for k, v in KINDS.items() if "power" in v)
NOBODY = 65534

sys.path.insert(0, str(REPO / "lab" / "emulator"))
from vllm_emulator.power import DEFAULT_POWER_FILE, UNPINNED_CLOCKS_PENALTY, parse_power_state  # noqa: E402


def load_script(path: Path, name: str) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def unit(kind_id: str) -> Unit:
    return Unit(f"{KINDS[kind_id]['host_prefix']}-01", 0, kind_id, KINDS[kind_id], "10.213.77.10")


def mode(kind_id: str, mode_id: int) -> dict[str, Any]:
    return next(m for m in KINDS[kind_id]["power"]["modes"] if m["id"] == mode_id)


def gpu_hz(kind_id: str, mode_id: int) -> int:
    value = int(mode(kind_id, mode_id)["gpu_max_hz"])
    return value if value > 0 else int(KINDS[kind_id]["power"]["clocks"]["gpu_max_hz"])


class UnitRoot:
    """A scratch unit: the kind's identity files under `root`, nvpmodel and jetson_clocks
    linked to the stand-in as the unit tar links them."""

    def __init__(self, root: Path, kind_id: str) -> None:
        self.root = root
        self.kind_id = kind_id
        for name, content in identity_files(unit(kind_id)).items():
            target = root / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        self.bin = root / "bin"
        self.bin.mkdir()
        for name in ("nvpmodel", "jetson_clocks"):
            (self.bin / name).symlink_to(STAND_IN)
        # Everyone may read and traverse it (the non-root runs below).
        for directory, _dirs, _files in os.walk(root):
            os.chmod(directory, 0o755)

    def run(self, command: str, *args: str, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
        exe = str(STAND_IN) if command == "self" else str(self.bin / command)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root",
               "SPECFLEET_LAB_POWER_ROOT": str(self.root)}
        user: dict[str, Any] = {}
        if as_nobody and os.geteuid() == 0:
            user = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        return subprocess.run([exe, *args], env=env, capture_output=True, text=True, check=False, timeout=30, **user)

    def ok(self, command: str, *args: str) -> str:
        proc = self.run(command, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def power_json(self) -> dict[str, Any]:
        return json.loads((self.root / power.POWER_FILE.lstrip("/")).read_text())

    def gpu_line(self) -> str:
        return next(line for line in self.ok("jetson_clocks", "--show").splitlines() if line.startswith("GPU "))


@pytest.fixture()
def make_root() -> Iterator[Any]:
    # Not pytest's tmp_path: its parents are 0700 and the non-root runs must get in.
    made: list[Path] = []

    def make(kind_id: str) -> UnitRoot:
        root = Path(tempfile.mkdtemp(prefix="sflab-power-"))
        made.append(root)
        return UnitRoot(root, kind_id)

    yield make
    for root in made:
        shutil.rmtree(root)


# ---- the data and the files of a unit --------------------------------------------------
@pytest.mark.parametrize("kind_id", JETSONS)
def test_a_flashed_jetson_starts_below_maxn(kind_id, make_root):
    spec = power.power_spec(KINDS[kind_id])
    maxn = power.maxn_mode(spec)
    default = spec["default_mode"]
    assert default != maxn["id"] and gpu_hz(kind_id, default) < gpu_hz(kind_id, maxn["id"])
    box = make_root(kind_id)
    box.ok("self", "boot")
    assert box.ok("nvpmodel", "-q") == f"NV Power Mode: {mode(kind_id, default)['name']}\n{default}\n"
    listed = [line for line in box.ok("nvpmodel", "-p", "--verbose").splitlines() if "POWER_MODEL:" in line]
    assert listed == [f"NVPM VERB: POWER_MODEL: ID={m['id']} NAME={m['name']}"
                      for m in sorted(spec["modes"], key=lambda m: m["id"])]


def test_maxn_ids_per_class():
    by_class = {KINDS[k]["device_class"]: power.maxn_mode(power.power_spec(KINDS[k])) for k in JETSONS}
    assert {c: (m["id"], m["name"]) for c, m in by_class.items()} == {
        "thor": (0, "MAXN"), "agx_orin": (0, "MAXN"), "orin_nx": (0, "MAXN"), "orin_nano": (2, "MAXN_SUPER"),
    }


def test_only_jetsons_get_nvpmodel():
    spark = unit("dgxspark-gb10-dgxos7.2.3")
    assert power.power_spec(spark.kind) is None
    assert power.NVPMODEL_CONF not in identity_files(spark) and power.command_links(spark) == {}
    with tarfile.open(fileobj=io.BytesIO(unit_tar(spark, "ssh-ed25519 AAAA lab"))) as tar:
        names = tar.getnames()
    assert "usr/sbin/nvpmodel" not in names and "etc/nvpmodel.conf" not in names


def test_a_jetson_tar_links_the_commands_to_the_image_stand_in():
    with tarfile.open(fileobj=io.BytesIO(unit_tar(unit("orinnx-16-r36.4.3"), "ssh-ed25519 AAAA lab"))) as tar:
        links = {m.name: m for m in tar.getmembers() if m.issym()}
        conf = tar.extractfile("etc/nvpmodel.conf").read().decode()
    assert {name: m.linkname for name, m in links.items()} == {
        "usr/sbin/nvpmodel": power.STAND_IN, "usr/bin/jetson_clocks": power.STAND_IN,
    }
    assert all(m.uid == 0 and m.gid == 0 for m in links.values())
    assert "< PM_CONFIG DEFAULT=2 >" in conf and "< POWER_MODEL ID=0 NAME=MAXN >" in conf


@pytest.mark.parametrize("flavour", [images.ROOT_UNIT, images.STOCK_UNIT], ids=["root", "stock"])
def test_both_unit_images_carry_the_stand_in(flavour):
    files = images.context_files(IMAGES, flavour)
    source = files[f"rootfs{power.STAND_IN}"]
    assert source == STAND_IN and source.stat().st_mode & 0o111


def test_the_stand_in_says_it_is_emulated():
    header = STAND_IN.read_text().split("\nimport ", 1)[0]
    assert "EMULATION" in header and "NOT NVIDIA software" in header


@pytest.mark.parametrize("command", ["nvpmodel", "jetson_clocks"])
@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_say_emulated(command, option, make_root):
    out = make_root("orinnx-16-r36.4.3").ok(command, option)
    assert "EMULATION" in out and command in out


# ---- what the toolkit will see on a fresh Orin NX ------------------------------------------
def test_fresh_orin_nx_query_and_show(make_root):
    box = make_root("orinnx-16-r36.4.3")
    box.ok("self", "boot")
    assert box.ok("nvpmodel", "-q") == "NV Power Mode: 15W\n2\n"
    show = box.ok("jetson_clocks", "--show").splitlines()
    clocks = KINDS["orinnx-16-r36.4.3"]["power"]["clocks"]
    assert show[0] == f"SOC family:tegra234  Machine:{KINDS['orinnx-16-r36.4.3']['model']}"
    assert show[1] == "Online CPUs: 0-3"
    assert f"GPU MinFreq={clocks['gpu_min_hz']} MaxFreq={gpu_hz('orinnx-16-r36.4.3', 2)} " \
           f"CurrentFreq={clocks['gpu_min_hz']}" in show
    assert show[-1] == "NV Power Mode: 15W"
    assert sum(line.startswith("cpu") for line in show) == clocks["cpu_count"]
    assert (box.root / "var/lib/nvpmodel/status").read_text() == "pmode:0002 fmode:quiet\n"
    expected = {"emulated": True, "mode_id": 2, "mode_name": "15W", "gpu_max_freq_hz": 612000000,
                "maxn_mode_id": 0, "maxn_mode_name": "MAXN", "maxn_gpu_max_freq_hz": 918000000,
                "clocks_pinned": False}
    state = box.power_json()
    assert {key: state[key] for key in expected} == expected


# ---- state: the mode persists, the pinning does not ------------------------------------------
def test_maxn_and_pinned_clocks_then_a_restart(make_root):
    kind = "agxorin-64-r36.4.3"
    box = make_root(kind)
    box.ok("self", "boot")
    assert box.ok("nvpmodel", "-m", "0") == ""
    assert box.ok("nvpmodel", "-q") == "NV Power Mode: MAXN\n0\n"
    box.ok("jetson_clocks")
    top = gpu_hz(kind, 0)
    assert box.gpu_line() == f"GPU MinFreq={top} MaxFreq={top} CurrentFreq={top}"
    state = box.power_json()
    assert (state["mode_name"], state["clocks_pinned"], state["gpu_max_freq_hz"]) == ("MAXN", True, top)
    # The unit restarts: specfleet-lab-init runs the boot step.
    boot = box.ok("self", "boot")
    assert "pinning cleared" in boot
    assert box.ok("nvpmodel", "-q") == "NV Power Mode: MAXN\n0\n"
    low = KINDS[kind]["power"]["clocks"]["gpu_min_hz"]
    assert box.gpu_line() == f"GPU MinFreq={low} MaxFreq={top} CurrentFreq={low}"
    assert box.power_json()["clocks_pinned"] is False and box.power_json()["mode_id"] == 0


def test_a_mode_change_undoes_the_pinning(make_root):
    box = make_root("thor-t5000-r38.2")
    box.ok("self", "boot")
    box.ok("jetson_clocks")
    assert box.power_json()["clocks_pinned"] is True
    box.ok("nvpmodel", "-m", "0")
    state = box.power_json()
    assert state["clocks_pinned"] is False and state["mode_id"] == 0
    min_freq, max_freq = (int(part.split("=")[1]) for part in box.gpu_line().split()[1:3])
    assert min_freq < max_freq


def test_power_json_is_replaced_by_rename(make_root):
    # The shim mounts its directory, which shows a renamed-in file; a half-written one never.
    box = make_root("orinnx-16-r36.4.3")
    box.ok("self", "boot")
    target = box.root / power.POWER_FILE.lstrip("/")
    before = target.stat().st_ino
    box.ok("nvpmodel", "-m", "0")
    assert target.stat().st_ino != before
    assert [p.name for p in target.parent.iterdir()] == ["power.json"]


def test_an_unknown_mode_fails_and_changes_nothing(make_root):
    box = make_root("orinnano-8-super-r36.4.7")
    box.ok("self", "boot")
    for bad in ("9", "x"):
        proc = box.run("nvpmodel", "-m", bad)
        assert proc.returncode != 0 and f"NVPM ERROR: request for bad power mode {bad}" in proc.stdout
    assert box.ok("nvpmodel", "-q") == "NV Power Mode: 15W\n0\n"


def test_only_root_changes_state(make_root):
    box = make_root("orinnx-16-r36.4.3")
    box.ok("self", "boot")
    before = box.power_json()
    for args in (("nvpmodel", "-m", "0"), ("jetson_clocks",), ("jetson_clocks", "--show")):
        proc = box.run(*args, as_nobody=True)
        assert proc.returncode != 0, args
        assert "root" in proc.stdout, proc.stdout
    assert box.run("jetson_clocks", as_nobody=True).stdout.startswith("Error: Run this script(")
    # Reading the mode needs no root.
    assert box.run("nvpmodel", "-q", as_nobody=True).stdout == "NV Power Mode: 15W\n2\n"
    assert box.power_json() == before


def test_store_and_restore(make_root):
    box = make_root("orinnx-16-r36.4.3")
    box.ok("self", "boot")
    proc = box.run("jetson_clocks", "--restore")
    assert proc.returncode != 0 and "/root/l4t_dfs.conf" in proc.stdout
    box.ok("jetson_clocks", "--store")
    assert (box.root / "root" / "l4t_dfs.conf").is_file()
    box.ok("jetson_clocks")
    assert box.power_json()["clocks_pinned"] is True
    box.ok("jetson_clocks", "--restore")
    assert box.power_json()["clocks_pinned"] is False


def test_boot_on_a_unit_without_nvpmodel_does_nothing(make_root):
    box = make_root("dgxspark-gb10-dgxos7.2.3")
    assert "not a Jetson" in box.ok("self", "boot")
    assert not (box.root / power.POWER_FILE.lstrip("/")).exists()


def test_the_init_runs_the_boot_step_before_sshd(monkeypatch):
    init = load_script(INIT, "specfleet_lab_init_under_test")
    assert init.JETSON_POWER == power.STAND_IN
    calls: list[list[str]] = []
    monkeypatch.setattr(init.os.path, "exists", lambda p: p == power.STAND_IN)
    monkeypatch.setattr(init.subprocess, "run", lambda argv, **_: calls.append(argv))
    init.boot_power_state()
    assert calls == [[power.STAND_IN, "boot"]]
    source = INIT.read_text()
    assert source.index("    boot_power_state()") < source.index("    sshd = start_sshd()")


# ---- the runtime shim -------------------------------------------------------------------
def bundle(tmp_path: Path, env: list[str] | None = None) -> Path:
    path = tmp_path / "bundle"
    path.mkdir()
    spec = {"process": {"env": env or ["PATH=/usr/bin"]}, "mounts": [{"destination": "/proc", "type": "proc"}]}
    (path / "config.json").write_text(json.dumps(spec))
    return path


def test_the_shim_mounts_the_power_directory(tmp_path, monkeypatch):
    shim = load_script(SHIM, "nvidia_container_runtime_under_test")
    # The three ends agree: the stand-in writes here, the shim mounts it there, the emulator reads.
    pairs = dict(shim.INJECT)
    assert pairs[str(Path(power.POWER_FILE).parent)] == str(Path(DEFAULT_POWER_FILE).parent)
    gpu, power_dir = tmp_path / "gpu.json", tmp_path / "power"
    gpu.write_text("{}")
    power_dir.mkdir()
    (power_dir / "power.json").write_text("{}")
    monkeypatch.setattr(shim, "INJECT", ((str(gpu), "/run/specfleet-lab/gpu.json"),
                                         (str(tmp_path / "faults.json"), "/run/specfleet-lab/faults.json"),
                                         (str(power_dir), "/run/specfleet-lab/power")))
    assert shim.inject(str(bundle(tmp_path))) == ["/run/specfleet-lab/gpu.json", "/run/specfleet-lab/power"]
    mounts = {m["destination"]: m for m in json.loads((tmp_path / "bundle" / "config.json").read_text())["mounts"]}
    mount = mounts["/run/specfleet-lab/power"]
    assert mount["source"] == str(power_dir) and mount["type"] == "bind" and "ro" in mount["options"]
    # No power directory (a Spark, a unit before its first boot): no mount.
    shutil.rmtree(power_dir)
    other = tmp_path / "other"
    other.mkdir()
    assert shim.inject(str(bundle(other))) == ["/run/specfleet-lab/gpu.json"]
    # NVIDIA_VISIBLE_DEVICES=void: nothing, as the real runtime.
    void = tmp_path / "void"
    void.mkdir()
    assert shim.inject(str(bundle(void, ["NVIDIA_VISIBLE_DEVICES=void"]))) == []


# ---- the chain to the emulator ------------------------------------------------------------
def test_the_emulator_slows_a_fresh_unit_by_the_conf_ratio(make_root):
    kind = "orinnx-16-r36.4.3"
    box = make_root(kind)
    box.ok("self", "boot")
    fresh = parse_power_state(box.power_json())
    default, maxn = KINDS[kind]["power"]["default_mode"], power.maxn_mode(KINDS[kind]["power"])["id"]
    ratio = gpu_hz(kind, maxn) / gpu_hz(kind, default)
    assert fresh.step_time_factor == pytest.approx(ratio * UNPINNED_CLOCKS_PENALTY)
    box.ok("nvpmodel", "-m", str(maxn))
    assert parse_power_state(box.power_json()).step_time_factor == pytest.approx(UNPINNED_CLOCKS_PENALTY)
    box.ok("jetson_clocks")
    assert parse_power_state(box.power_json()).step_time_factor == 1.0
