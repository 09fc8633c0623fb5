"""`specfleet distribute`: copy a store to many units with real rsync over SSH, unit to unit.

The controller runs the ``fanout.Scheduler`` event by event: every copy is one process
(``rsync`` pushed from the controller, or ``ssh TARGET python3 fanout_unit.py pull`` where
the target pulls from a peer's serve dir), run in a thread pool; each outcome goes back to
the scheduler, which starts the next copies at once. Units pass on a piece as soon as they
verified it (sha256 against the manifest), and switch the whole store in (``promote``, the
code ``cache_store state=active`` runs) as soon as they hold every piece. A unit never has
a partial store live: copies land in staging and only a fully verified copy is switched in.

Keys: units pull from each other with fleet key pairs made for this run alone, one per unit
(in the run's private temporary directory on the controller, gone with it). Each unit gets its
own private key, and in its authorized_keys every other unit's public key as
``restrict,expiry-time="<local time>",from="<that unit's address>",``
``command="rrsync -ro <root>/.specfleet/serve" ... specfleet-fanout:<run>``
(no shell, no forwarding, read-only, confined to verified files, only from the address of the
unit that holds the private key, and only until the run's key lifetime is over: key_lifetime);
a known_hosts file holding every peer's host key is installed for the copy. It fails closed: a
unit without rrsync gets no key at all, receives from the controller only and serves no peer
(``fleet_key``). Every run removes the fleet keys of earlier runs from a unit before anything
else, and at its end removes its own from every unit it prepared, units that dropped out
included; a unit it cannot reach then is named (``may_remain``): the next run that reaches it
removes what is left, and until then the keys' expiry-time ends them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import secrets
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils import fanout_unit, fleet_key
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT

from specfleet import loading, variables
from specfleet.fanout import CONTROLLER, Piece, Scheduler, Transfer, manifest_pieces

# The unit-side helper ships with the collection's module_utils, beside store_manifest.py
# and the atomic_files.py that one switches stores in with.
UNIT_HELPER_DIR = Path(fanout_unit.__file__).resolve().parent
HELPER_FILES = ("fanout_unit.py", "store_manifest.py", "fleet_key.py", "atomic_files.py")

Event = Callable[[str, dict[str, Any]], None]

# How long the controller lets one unit's prepare run (the fleet keys are installed at its start).
PREPARE_TIMEOUT = 600
# A unit-to-unit copy ends after this many rsync (I/O) timeouts whatever it is doing: the
# controller kills the ssh it runs in (Options.pull_timeout).
PULL_TIMEOUTS = 20
# Past the run's longest life, before its fleet keys expire: a step of the unit's clock (an NTP
# correction) during the run, the rounding to whole seconds.
KEY_MARGIN = 600


@dataclass
class Node:
    """A unit as the controller reaches it (ssh) and as peers reach it (peer)."""

    name: str
    host: str
    user: str = "root"
    port: int = 22
    key_file: str | None = None
    ssh_args: list[str] = field(default_factory=list)
    peer: str = ""  # address other units use; default: host
    peer_port: int = 22  # the port other units reach its ssh on

    def __post_init__(self) -> None:
        self.peer = self.peer or self.host

    def known_hosts_name(self) -> str:
        """The name ssh looks this unit up by when a peer reaches it: ``[addr]:port`` off 22."""
        return self.peer if self.peer_port == 22 else f"[{self.peer}]:{self.peer_port}"

    def connection_args(self) -> list[str]:
        """ssh options that reach this unit as its inventory says (port, user, key, common args)."""
        return ["-p", str(self.port), "-l", self.user, *(["-i", self.key_file] if self.key_file else []),
                *self.ssh_args]


def nodes_from_inventory(inventory: str | list[str], limit: Iterable[str] | None = None) -> list[Node]:
    """Units of an Ansible inventory (ansible_host/user/port/key/common args;
    ``specfleet_fanout_address`` and ``specfleet_fanout_port`` override what peers use: by
    default the controller's address and port). Every host's connection settings are checked
    first (variables.connection_problems): a ValueError names each host and variable."""
    from specfleet.inventory import host_variables

    wanted = set(limit) if limit else None
    nodes = []
    problems: list[str] = []
    destinations: dict[str, tuple[str, int] | None] = {}
    for name, hv in host_variables(inventory).items():
        if wanted is not None and name not in wanted:
            continue
        if hv.get("ansible_connection") in ("local",):
            continue
        found = variables.connection_problems(name, hv)
        if found:
            problems += found
            continue
        destinations[name] = variables.destination_of(name, hv)
        host = str(variables.first_set(hv, variables.HOST_VARIABLES, name))
        port = variables.port_of(hv, *variables.HOST_PORT_VARIABLES)
        nodes.append(Node(
            name=name, host=host, user=str(variables.first_set(hv, variables.USER_VARIABLES, "root")),
            port=port, key_file=variables.first_set(hv, variables.KEY_VARIABLES),
            ssh_args=shlex.split(str(hv.get("ansible_ssh_common_args", ""))),
            peer=str(variables.first_set(hv, ("specfleet_fanout_address",), host)),
            peer_port=variables.port_of(hv, "specfleet_fanout_port", default=port),
        ))
    problems += variables.same_unit_problems(destinations)
    if problems:
        raise ValueError("; ".join(problems))
    if wanted is not None:
        missing = wanted - {n.name for n in nodes}
        if missing:
            raise ValueError(f"not in the inventory: {', '.join(sorted(missing))}")
    if not nodes:
        raise ValueError("no hosts")
    return nodes


def new_run_id(now: float | None = None, token: str | None = None) -> str:
    """When the run started (UTC) and a random token: names the run's fleet key."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(3) if token is None else token}"


def no_rrsync_message(unit: str, user: str) -> str:
    """Why a unit takes no part in unit-to-unit copies, and how to change that."""
    return (f"{unit}: {fleet_key.NO_RRSYNC}, so no fleet key was installed there (without rrsync's "
            f"forced command it would give every peer a shell as {user}); {unit} receives the store "
            f"from the controller and serves no peer. To fan out to it: {fleet_key.RRSYNC_FIX}")


def may_remain_message(unit: str, reason: str) -> str:
    return (f"{unit}: a fleet key may remain there ({reason.strip()[-300:]}); it is removed at the start "
            f"of the next run that reaches {unit}")


@dataclass
class Options:
    root: str = LAYOUT["hf_cache_dir"]
    subdir: str = "hub"
    pieces: int = 8
    controller_slots: int = 1
    unit_slots: int = 1
    max_attempts: int = 4
    rsync_timeout: int = 30
    # The simple, defensible mode: every unit pulls the whole store from the controller
    # (what `push` means in the benchmark). Same code path, one source with N slots.
    push: bool = False

    def pull_timeout(self) -> int:
        """The longest one unit-to-unit copy may take: its ssh is killed then."""
        return self.rsync_timeout * PULL_TIMEOUTS


def key_lifetime(options: Options, units: int, workers: int) -> int:
    """Seconds a unit's fleet key entries live from their install (expiry-time, counted on
    the unit's clock): the longest the run's own limits let a unit still need to reach a peer,
    plus KEY_MARGIN.

    The run has no overall deadline, only limits per step: every prepare ends within
    PREPARE_TIMEOUT (``workers`` at a time), and the copies start once all have; a target
    takes one piece at a time, each at most ``max_attempts`` times, each copy ended after
    ``pull_timeout``; before its first copy it waits for sources, which double every round
    (ceil(log2(units + 1)) rounds, each up to ``max_attempts`` copies long, as the pieces).
    Defaults, 4 units: 600 + (8 + 3) * 4 * 600 + 600 s, about 7.7 hours; 60 units, about 9.8.
    A run that outlasts it (waits its limits do not bound) has its later unit-to-unit copies
    refused: they fail and count as attempts; no partial store goes live. The expiry is the
    backstop for a key no cleanup reached (a unit that dropped out, a killed driver); every
    run still removes its keys at its end."""
    prepare = math.ceil(units / max(1, workers)) * PREPARE_TIMEOUT
    rounds = options.pieces + math.ceil(math.log2(units + 1))
    return prepare + rounds * options.max_attempts * options.pull_timeout() + KEY_MARGIN


class Runner:
    """One distribution of one store version to a set of units."""

    def __init__(self, nodes: list[Node], store: Path, manifest: dict, options: Options,
                 on_event: Event | None = None):
        if not nodes:
            raise ValueError("no units to distribute to")
        self.nodes = {n.name: n for n in nodes}
        self.store = store
        self.manifest = manifest
        self.opt = options
        self.on_event = on_event or (lambda kind, data: None)
        self.pieces: list[Piece] = manifest_pieces(manifest, 1 if options.push else options.pieces)
        self.piece_of = {f: p.index for p in self.pieces for f in p.files}
        self.total = sum(p.size for p in self.pieces)
        self.helper_dir = f"{options.root}/.specfleet/fanout"
        self.tmp = Path(tempfile.mkdtemp(prefix="sf-fo-"))  # 0700: holds the run's private key
        self.run_id = new_run_id()
        # Units without rrsync: no fleet key, served by the controller only (unit -> message).
        self.refused: dict[str, str] = {}
        self.shipped: set[str] = set()
        self.masters: list[Node] = []
        self.info: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.log: list[dict[str, Any]] = []
        self.dead: dict[str, str] = {}
        self.host_keys: dict[str, str] = {}
        self.workers = min(32, max(4, len(nodes)))

    # ---- ssh plumbing ----------------------------------------------------------------
    def ssh_base(self, node: Node, multiplex: bool = True, connect_timeout: int = 8) -> list[str]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", *node.connection_args()]
        if multiplex:
            argv += ["-o", f"ControlPath={self.tmp}/%C", "-o", "ControlMaster=no"]
        else:
            argv += ["-o", "ControlPath=none"]
        return argv

    def ssh(self, node: Node, command: str, stdin: bytes | str | None = None,
            timeout: float | None = None, multiplex: bool = True) -> subprocess.CompletedProcess:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return subprocess.run([*self.ssh_base(node, multiplex), "--", node.host, command], input=data,
                              capture_output=True, timeout=timeout, check=False)

    def helper(self, node: Node, command: str, request: dict, timeout: float | None = None,
               multiplex: bool = True) -> dict:
        payload = {"root": self.opt.root, "subdir": self.opt.subdir, "manifest_file": "manifest.json",
                   **request}
        proc = self.ssh(node, f"python3 {shlex.quote(self.helper_dir)}/fanout_unit.py {command}",
                        json.dumps(payload), timeout=timeout, multiplex=multiplex)
        if proc.returncode != 0:
            raise RemoteError(node.name, command, proc.returncode, proc.stderr.decode(errors="replace"))
        return json.loads(proc.stdout)

    def start_master(self, node: Node) -> None:
        base = self.ssh_base(node, multiplex=False)[:-2]  # without ControlPath=none
        master = [*base, "-o", f"ControlPath={self.tmp}/%C", "-o", "ControlMaster=yes",
                  "-o", "ControlPersist=yes", "-f", "-N", "--", node.host]
        proc = subprocess.run(master, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=30, check=False)
        if proc.returncode != 0:
            raise RemoteError(node.name, "ssh", proc.returncode, proc.stderr.decode(errors="replace"))
        with self.lock:
            self.masters.append(node)

    def stop_masters(self) -> None:
        for node in self.masters:
            subprocess.run([*self.ssh_base(node), "-O", "exit", "--", node.host], capture_output=True,
                           timeout=15, check=False)
        self.masters.clear()

    def alive(self, node_name: str) -> bool:
        """A fresh connection (not the multiplexed one) answers within a few seconds."""
        if node_name == CONTROLLER:
            return True
        node = self.nodes[node_name]
        try:
            proc = subprocess.run([*self.ssh_base(node, multiplex=False, connect_timeout=4),
                                   "--", node.host, "true"], capture_output=True, timeout=8, check=False)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    # ---- set-up ------------------------------------------------------------------------
    def ship_helper(self, node: Node) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in HELPER_FILES:
                tar.add(str(UNIT_HELPER_DIR / name), arcname=name)
            data = json.dumps(self.manifest).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        quoted = shlex.quote(self.helper_dir)
        # The same round trip reads the unit's host key (peers will check it).
        proc = self.ssh(node, f"mkdir -p {quoted} && tar -x -o -f - -C {quoted} && "
                        "cat /etc/ssh/ssh_host_ed25519_key.pub", buf.getvalue(), timeout=60)
        if proc.returncode != 0:
            raise RemoteError(node.name, "ship helper", proc.returncode, proc.stderr.decode(errors="replace"))
        with self.lock:
            self.host_keys[node.name] = " ".join(proc.stdout.decode().split()[:2])
            self.shipped.add(node.name)

    def run_key(self, index: int) -> tuple[str, str]:
        """A new key pair for this run's unit number ``index`` only, in the run's temporary
        directory (removed with it)."""
        key = self.tmp / f"fleet-{self.run_id}-{index}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", fleet_key.key_comment(self.run_id),
                        "-f", str(key)], check=True, capture_output=True)
        # The public key without its comment: each entry gets the run's (fleet_key.authorized_line).
        return key.read_text(), " ".join(key.with_name(key.name + ".pub").read_text().split()[:2])

    def key_request(self, alive: list[Node]) -> dict[str, dict]:
        """What `prepare` installs on each unit (where rrsync can confine it), by unit: its own
        private key, and every other unit's public key with the address it connects from.

        A key pair per unit costs nothing that matters: ssh-keygen makes an ed25519 pair in a
        few milliseconds (60 units: about 0.25 s, before the prepares), and the request, which
        goes out in the prepare round trip either way, grows by about 125 bytes per peer (60
        units: 7 kB, 13 kB in all with the peers' host keys). In return a private key taken
        from one unit is refused from every other address."""
        pairs = {node.name: self.run_key(index) for index, node in enumerate(alive)}
        known = "".join(f"{self.nodes[n].known_hosts_name()} {k}\n" for n, k in sorted(self.host_keys.items()) if k)
        lifetime = key_lifetime(self.opt, len(alive), self.workers)
        return {node.name: {"keys": {
            "run_id": self.run_id, "private_key": pairs[node.name][0], "known_hosts": known,
            "key_lifetime_s": lifetime,
            "authorized": [{"address": peer.peer, "public_key": pairs[peer.name][1]}
                           for peer in alive if peer.name != node.name]}} for node in alive}

    # ---- copies --------------------------------------------------------------------------
    def copy(self, transfer: Transfer) -> dict[str, Any]:
        """Run one copy; returns {ok, source_alive, target_alive, reason, promoted}."""
        target = self.nodes[transfer.target]
        files = list(self.pieces[transfer.piece].files)
        info = self.info[transfer.target]
        started = time.monotonic()
        try:
            if transfer.source == CONTROLLER:
                result = self.push_piece(target, files, info)
            else:
                source = self.nodes[transfer.source]
                result = self.helper(target, "pull", {
                    "files": files, "peer": source.peer, "peer_user": source.user, "peer_port": source.peer_port,
                    "link_dest": info.get("link_dest"),
                    "timeout": self.opt.rsync_timeout,
                }, timeout=self.opt.pull_timeout())
        except (RemoteError, subprocess.TimeoutExpired, json.JSONDecodeError) as err:
            result = {"ok": [], "bad": files, "transport": True, "stderr": str(err)}
        outcome: dict[str, Any] = {"seconds": time.monotonic() - started, "bad": result.get("bad", []),
                                   "rsync_seconds": result.get("rsync_seconds"),
                                   "reason": (result.get("stderr") or "").strip()[-300:]}
        if not result.get("bad"):
            outcome.update(ok=True, source_alive=True, target_alive=True)
            return outcome
        outcome["ok"] = False
        if result.get("transport", False) or result.get("rsync_rc"):
            # Who failed? Ask both ends over fresh connections.
            outcome["target_alive"] = self.alive(transfer.target)
            outcome["source_alive"] = self.alive(transfer.source)
        else:
            outcome.update(source_alive=True, target_alive=True,
                           reason=f"sha256 mismatch: {', '.join(result['bad'][:3])}")
        return outcome

    def push_piece(self, target: Node, files: list[str], info: dict) -> dict:
        listing = self.tmp / f"files-{threading.get_ident()}"
        listing.write_text("".join(f + "\n" for f in files))
        rsh = " ".join(shlex.quote(a) for a in self.ssh_base(target))
        argv = ["rsync", "-a", "--partial", f"--timeout={self.opt.rsync_timeout}", f"--files-from={listing}",
                "-e", rsh]
        if info.get("link_dest"):
            argv.append(f"--link-dest={info['link_dest']}")
        source_dir = self.store / self.opt.subdir / self.manifest["name"] if self.opt.subdir else \
            self.store / self.manifest["name"]
        argv += [f"{source_dir}/", f"{target.host}:{info['staging_dir']}/"]
        proc = subprocess.run(argv, capture_output=True, check=False)
        if proc.returncode != 0:
            return {"ok": [], "bad": files, "transport": True, "rsync_rc": proc.returncode,
                    "stderr": proc.stderr.decode(errors="replace")}
        return self.helper(target, "verify", {"files": files}, timeout=300)

    def promote(self, name: str) -> dict:
        try:
            return self.helper(self.nodes[name], "promote", {}, timeout=600)
        except (RemoteError, subprocess.TimeoutExpired) as err:
            return {"problems": [str(err)]}

    # ---- the run -------------------------------------------------------------------------
    def event(self, kind: str, data: dict[str, Any]) -> None:
        entry = {"t": round(time.monotonic() - self.t0, 3), "event": kind, **data}
        with self.lock:
            self.log.append(entry)
        self.on_event(kind, entry)

    def run(self) -> dict[str, Any]:
        self.t0 = time.monotonic()
        names = list(self.nodes)
        unreachable: dict[str, str] = {}

        def setup(node: Node) -> None:
            try:
                self.start_master(node)
                self.ship_helper(node)
            except (RemoteError, subprocess.TimeoutExpired) as err:
                unreachable[node.name] = str(err)

        result: dict[str, Any] = {}
        try:
            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                list(pool.map(setup, self.nodes.values()))
            reachable = [self.nodes[n] for n in names if n not in unreachable]
            # Push mode copies nothing unit to unit: no key (prepare still removes old ones).
            requests = {} if self.opt.push else self.key_request(reachable)

            def prep(node: Node) -> None:
                try:
                    info = self.helper(node, "prepare", requests.get(node.name, {}), timeout=PREPARE_TIMEOUT)
                except (RemoteError, subprocess.TimeoutExpired) as err:
                    unreachable[node.name] = str(err)
                    return
                self.info[node.name] = info
                if info.get("fleet_key") == "refused":
                    with self.lock:
                        self.refused[node.name] = no_rrsync_message(node.name, node.user)
                    self.event("refused", {"unit": node.name, "message": self.refused[node.name]})

            with ThreadPoolExecutor(max_workers=self.workers) as pool:
                list(pool.map(prep, reachable))
            self.event("prepared", {"units": len(self.info), "unreachable": sorted(unreachable),
                                    "controller_only": sorted(self.refused)})
            result = self._distribute(names, unreachable)
        finally:
            may_remain = self._cleanup(names, unreachable)
            self.stop_masters()
            shutil.rmtree(self.tmp, ignore_errors=True)  # the run's private key with it
        result["fleet_key"] = {"run": self.run_id, "refused": dict(sorted(self.refused.items())),
                               "may_remain": may_remain}
        result["seconds"] = round(time.monotonic() - self.t0, 2)
        return result

    def _distribute(self, names: list[str], unreachable: dict[str, str]) -> dict[str, Any]:
        have: dict[str, set[int]] = {}
        for name, info in self.info.items():
            held = set(info["have"])
            have[name] = {p.index for p in self.pieces if set(p.files) <= held}
        push = self.opt.push
        sched = Scheduler(names, [p.index for p in self.pieces], have,
                          controller_slots=len(names) if push else self.opt.controller_slots,
                          unit_slots=self.opt.unit_slots, max_attempts=self.opt.max_attempts,
                          units_serve=not push, controller_only=self.refused)
        for name, reason in unreachable.items():
            sched.drop(name, f"unreachable: {reason.strip()[-200:]}")
        promoted: dict[str, dict] = {}
        bytes_from: dict[str, int] = {"controller": 0, "peers": 0}
        to_promote: list[str] = []
        for name in names:
            info = self.info.get(name)
            if info and info["up_to_date"]:
                promoted[name] = {"problems": [], "changed": False}
            elif info and (have.get(name, set()) >= sched.all):
                to_promote.append(name)
        with ThreadPoolExecutor(max_workers=max(4, 2 * len(names))) as pool:
            jobs: dict[Future, tuple[str, Any]] = {}
            for name in to_promote:
                jobs[pool.submit(self.promote, name)] = ("promote", name)
            while True:
                for transfer in sched.assign():
                    self.event("start", {"source": transfer.source, "target": transfer.target,
                                         "piece": transfer.piece})
                    jobs[pool.submit(self.copy, transfer)] = ("copy", transfer)
                if not jobs:
                    break
                done, _ = wait(list(jobs), return_when=FIRST_COMPLETED)
                for future in done:
                    kind, what = jobs.pop(future)
                    if kind == "promote":
                        promoted[what] = future.result()
                        problems = promoted[what].get("problems")
                        self.event("promoted" if not problems else "promote_failed",
                                   {"unit": what, "problems": (problems or [])[:5]})
                        if problems:
                            self._revoke(sched, what, problems)
                        continue
                    transfer: Transfer = what
                    outcome = future.result()
                    size = self.pieces[transfer.piece].size
                    if outcome["ok"]:
                        sched.succeeded(transfer)
                        bytes_from["controller" if transfer.source == CONTROLLER else "peers"] += size
                        self.event("done", {"source": transfer.source, "target": transfer.target,
                                            "piece": transfer.piece, "bytes": size,
                                            "seconds": round(outcome["seconds"], 2),
                                            "rsync_seconds": outcome.get("rsync_seconds")})
                        if sched.complete(transfer.target):
                            jobs[pool.submit(self.promote, transfer.target)] = ("promote", transfer.target)
                    else:
                        was_dead = set(sched.dead)
                        sched.failed(transfer, outcome["source_alive"], outcome["target_alive"], outcome["reason"])
                        self.event("failed", {"source": transfer.source, "target": transfer.target,
                                              "piece": transfer.piece, "reason": outcome["reason"],
                                              "source_alive": outcome["source_alive"],
                                              "target_alive": outcome["target_alive"]})
                        for node in (transfer.source, transfer.target):
                            if node in sched.dead and node not in was_dead:
                                self.event("dropped", {"unit": node, "reason": sched.dead[node]})
        self.dead = dict(sched.dead)
        outcome = sched.outcome()
        units = {}
        for name in names:
            status = outcome[name]
            if status == "complete":
                problems = promoted.get(name, {}).get("problems", ["not switched in"])
                status = "live" if not problems else f"not switched in: {'; '.join(problems[:3])}"
            units[name] = status
        return {
            "store": self.manifest["name"], "id": self.manifest["id"], "bytes": self.total,
            "pieces": len(self.pieces), "mode": "push" if push else "fanout", "units": units,
            "ok": all(s == "live" for s in units.values()),
            "copies": len(sched.served), "bytes_from": bytes_from,
            "failures": sum(1 for e in self.log if e["event"] == "failed"),
        }

    def _revoke(self, sched: Scheduler, name: str, problems: list[str]) -> None:
        bad = {p.split(":", 1)[0] for p in problems}
        pieces = {self.piece_of[f] for f in bad if f in self.piece_of}
        if pieces:
            sched.revoke(name, pieces)
            self.event("revoked", {"unit": name, "pieces": sorted(pieces)})

    def _cleanup(self, names: list[str], unreachable: dict[str, str]) -> dict[str, str]:
        """Remove the fleet key (every run's), the serve dir and the helper from every unit
        the helper reached, the ones that dropped out or failed to prepare included (over a
        fresh connection: their multiplexed one may be what failed). Returns, per unit that
        may still hold a fleet key, why."""
        may_remain: dict[str, str] = {}

        def clean(name: str) -> None:
            if name not in self.shipped:
                # Never prepared, so it never held this run's key; an earlier run's may be there.
                reason = f"not reached this run: {unreachable.get(name, 'unknown')}"
            else:
                dropped = name in unreachable or name in self.dead
                try:
                    self.helper(self.nodes[name], "cleanup", {"name": self.manifest["name"]},
                                timeout=60, multiplex=not dropped)
                    return
                except (RemoteError, subprocess.TimeoutExpired, json.JSONDecodeError) as err:
                    reason = f"cleanup failed: {err}"
            with self.lock:
                may_remain[name] = may_remain_message(name, reason)
            self.event("warning", {"unit": name, "message": may_remain[name]})

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(clean, names))
        return dict(sorted(may_remain.items()))


class RemoteError(RuntimeError):
    def __init__(self, unit: str, what: str, rc: int, stderr: str):
        super().__init__(f"{unit}: {what} exited {rc}: {stderr.strip()[-500:]}")
        self.unit, self.rc = unit, rc


# ---- CLI -------------------------------------------------------------------------------
MANIFEST_SHAPE: loading.Shape = {"name": str, "id": str, "files": dict}


def load_manifest(store: Path, name: str) -> dict:
    """The manifest of store entry ``name`` (a name, never a path), checked: a ValueError says
    what is wrong with which file."""
    if not variables.is_file_name(name):
        raise ValueError(f"--name {variables.shown(name)}: not an entry name (letters, digits, '.', '_' or '-')")
    path = store / "manifests" / f"{name}.json"
    if not path.exists():
        raise ValueError(f"{path} does not exist; run `specfleet cache manifest {store}` first")
    manifest = loading.load_json(path, shape=MANIFEST_SHAPE)
    bad = [file for file, entry in manifest["files"].items()
           if not isinstance(entry, dict) or not variables.is_integer(entry.get("size")) or entry["size"] < 0]
    if bad:
        raise loading.FileProblem(path, f"files.{bad[0]}: not an entry with a size in bytes")
    return manifest


def positive_count(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def progress_events(total_units: int, total_bytes: int, console: Any) -> tuple[Event, Callable[[], None]]:
    """A rich progress display fed by the runner's events; returns (on_event, stop)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description:<14}"), BarColumn(), DownloadColumn(),
                        TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console,
                        transient=False)
    overall = progress.add_task("all units", total=total_units * total_bytes, note="")
    per_unit: dict[str, Any] = {}
    show_units = total_units <= 24
    progress.start()

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "done":
            progress.advance(overall, data["bytes"])
            target = data["target"]
            if show_units:
                if target not in per_unit:
                    per_unit[target] = progress.add_task(target, total=total_bytes, note="")
                progress.update(per_unit[target], advance=data["bytes"], note=f"from {data['source']}")
        elif kind == "promoted" and show_units and data["unit"] in per_unit:
            progress.update(per_unit[data["unit"]], note="[green]live[/green]")
        elif kind in ("failed", "dropped", "promote_failed", "revoked", "warning", "refused"):
            detail = {k: v for k, v in data.items() if k not in ("t", "event")}
            progress.console.print(f"[yellow]{kind}[/yellow] {detail}")

    return on_event, progress.stop


def cmd_distribute(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    store = Path(args.store)
    try:
        problem = variables.unit_path_problem("--root", args.root) or (
            None if args.root.startswith("/") else f"--root {variables.shown(args.root)}: must be an absolute path")
        if problem:
            raise ValueError(problem)
        manifest = load_manifest(store, args.name)
    except ValueError as err:
        print(f"specfleet distribute: {err}", file=sys.stderr)
        return 2
    try:
        nodes = nodes_from_inventory(args.inventory, args.limit.split(",") if args.limit else None)
    except ValueError as err:
        print(f"specfleet distribute: -i {', '.join(args.inventory)}: {err}", file=sys.stderr)
        return 2
    options = Options(root=args.root, subdir=args.subdir, pieces=args.pieces,
                      controller_slots=args.controller_slots, unit_slots=args.unit_slots, push=args.push)
    console = Console(stderr=True)
    on_event, stop = (None, lambda: None)
    if args.format != "json":
        total = sum(int(e["size"]) for e in manifest["files"].values())
        on_event, stop = progress_events(len(nodes), total, console)
    try:
        result = Runner(nodes, store, manifest, options, on_event).run()
    finally:
        stop()
    if args.format == "json":
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        table = Table(title=f"{result['mode']} {result['store']} ({result['id']}) in {result['seconds']:.1f}s")
        table.add_column("unit")
        table.add_column("result")
        for name, status in result["units"].items():
            table.add_row(name, status if status != "live" else "[green]live[/green]")
        Console().print(table)
        for message in [*result["fleet_key"]["refused"].values(), *result["fleet_key"]["may_remain"].values()]:
            console.print(f"[yellow]{message}[/yellow]")
    return 0 if result["ok"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distribute", help="copy a store to many units, unit to unit (fan-out over rsync/ssh)")
    parser.add_argument("--store", required=True, help="controller store (STORE/<subdir>/<name>, STORE/manifests)")
    parser.add_argument("--name", required=True, help="entry of the store, e.g. models--org--name")
    parser.add_argument("-i", "--inventory", required=True, action="append",
                        help="Ansible inventory of the units (repeat for several sources, as ansible-playbook)")
    parser.add_argument("--limit", help="comma-separated host names (default: every host)")
    parser.add_argument("--root", default=Options.root, help="store root on the units (default %(default)s)")
    parser.add_argument("--subdir", default=Options.subdir, help="live dir below root and store (default hub)")
    parser.add_argument("--pieces", type=positive_count, default=Options.pieces,
                        help="split the store into this many pieces of whole files (default %(default)s)")
    parser.add_argument("--controller-slots", type=positive_count, default=1,
                        help="concurrent uploads from the controller")
    parser.add_argument("--unit-slots", type=positive_count, default=1, help="concurrent uploads from each unit")
    parser.add_argument("--push", action="store_true", help="no fan-out: the controller copies to every unit")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(func=cmd_distribute)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specfleet")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(["distribute", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
