"""`specfleet status`: what each unit serves now, its known-good serving and its last bench.

Everything is read from the unit itself in ONE remote shell command (its release record and
`docker inspect` of the serving container), so the answer is true even when the controller's
runs folder is from another machine or another day. The rollout keeps the last bench of a
candidate inside the record (``decisions``); the per-run outcome files are written on the
controller, not on the unit, so they are not read here.

Pure functions turn what was read into one row per unit; ``read_fleet`` is the only I/O
(paramiko, one connection per unit, in a thread pool, each bounded by a timeout).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape
from rich.table import Table

from specfleet import plan_trtllm
from specfleet import release as release_module
from specfleet import report as report_module

# Where the rollout leaves things on a unit (playbooks/rollout.yml, roles/specfleet_serve).
RELEASE_FILE = "/var/lib/specfleet/release.json"
CONTAINER_NAME = "specfleet-vllm"
HASH_LABEL = "org.specfleet.config-hash"  # plugins/modules/vllm_container.py
SECTIONS = ("release", "container")
DEFAULT_TIMEOUT = 10.0
MAX_WORKERS = 32


# --------------------------------------------------------------------------- what is read


@dataclass(frozen=True)
class Section:
    """One file or command output from the unit: its text and how reading it ended
    (``rc`` "0" on success, the command's exit code otherwise, or "nodocker")."""

    rc: str
    text: str


@dataclass(frozen=True)
class UnitRead:
    """What the I/O layer brings back for one unit; ``error`` set means unreachable."""

    host: str
    address: str
    error: str | None = None
    sections: Mapping[str, Section] = field(default_factory=dict)
    seconds: float | None = None


@dataclass(frozen=True)
class Target:
    """How to reach a unit, from its inventory variables."""

    host: str
    address: str
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    # False when the inventory says StrictHostKeyChecking=no (the lab): unknown keys are
    # accepted for this connection only. Nothing is ever written to a known_hosts file.
    strict_host_key: bool = True
    known_hosts_file: str | None = "~/.ssh/known_hosts"


# --------------------------------------------------------------------------- remote command


def remote_command(nonce: str) -> str:
    """One POSIX shell command that prints every section followed by a trailer line
    ``<nonce> <section> <rc>``. The nonce is fresh per call, so no file content can fake a
    trailer; LC_ALL=C keeps error messages in the English that ``read_release`` and
    ``read_container`` match."""
    marker = f"@@specfleet-status-{nonce}"
    script = "\n".join(
        [
            "export LC_ALL=C",
            f"N={marker}",
            # A non-root user reads the 0600 record through sudo when it may (no password prompt).
            'S=; if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then S="sudo -n"; fi',
            f"$S cat {RELEASE_FILE} 2>&1; rc=$?",
            'printf "\\n%s release %s\\n" "$N" "$rc"',
            "if command -v docker >/dev/null 2>&1; then",
            f"  $S docker inspect --type container {CONTAINER_NAME} 2>&1; rc=$?",
            "else rc=nodocker; fi",
            'printf "\\n%s container %s\\n" "$N" "$rc"',
        ]
    )
    # Run by sh whatever the user's login shell is.
    return f"sh -c {shlex.quote(script)}"


def parse_sections(stdout: str, nonce: str) -> dict[str, Section]:
    """Sections of ``remote_command``'s output; a section whose trailer never came is absent."""
    trailer = re.compile(rf"^@@specfleet-status-{re.escape(nonce)} (\w+) (\S+)$")
    sections: dict[str, Section] = {}
    lines: list[str] = []
    for line in stdout.splitlines():
        found = trailer.match(line)
        if found:
            # The command prints a newline before each trailer; strip it with any others.
            sections[found.group(1)] = Section(rc=found.group(2), text="\n".join(lines).strip("\n"))
            lines = []
        else:
            lines.append(line)
    return sections


# --------------------------------------------------------------------------- pure row logic


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:limit] or "no output"


def speculative_of(args: Any) -> dict[str, Any] | None:
    """The ``--speculative-config`` of a ``vllm serve`` command line, or None (baseline)."""
    if not isinstance(args, list):
        return None
    for index, arg in enumerate(args):
        text = None
        if arg == "--speculative-config" and index + 1 < len(args):
            text = args[index + 1]
        elif isinstance(arg, str) and arg.startswith("--speculative-config="):
            text = arg.split("=", 1)[1]
        if text is not None:
            try:
                config = json.loads(text)
            except (TypeError, ValueError):
                return {"method": "unparsed"}
            return config if isinstance(config, dict) else {"method": "unparsed"}
    return None


def spec_summary(spec: Any) -> dict[str, Any] | None:
    """The short form of a serving spec a person compares: id, kind, method, k, image."""
    if not isinstance(spec, Mapping):
        return None
    args = spec.get("args") if isinstance(spec.get("args"), list) else []
    files = spec.get("files") if isinstance(spec.get("files"), Mapping) else {}
    speculative = speculative_of(args) or plan_trtllm.speculation_in_files(args, files) or {}
    return {
        "spec_id": spec.get("spec_id"),
        "kind": spec.get("kind"),
        "method": speculative.get("method"),
        "num_speculative_tokens": speculative.get("num_speculative_tokens"),
        "image": spec.get("image"),
    }


def read_release(section: Section | None) -> tuple[dict[str, Any] | None, str, str | None]:
    """(record, state, problem). state: present, missing, unreadable, malformed.

    Unlike ``release.parse`` (which the rollout uses to start afresh), a broken record is
    reported here, not silently treated as empty."""
    if section is None:
        return None, "unreadable", f"{RELEASE_FILE}: no answer (the command was cut short)"
    if section.rc != "0":
        if "No such file or directory" in section.text:
            return None, "missing", None
        reason = re.sub(r"^(sudo: )?cat: [^:]*: ", "", _first_line(section.text))  # the path is said once
        return None, "unreadable", f"{RELEASE_FILE}: cannot read: {reason}"
    try:
        record = json.loads(section.text)
    except ValueError as exc:
        return None, "malformed", f"{RELEASE_FILE}: not valid JSON ({exc})"
    if not isinstance(record, dict):
        return None, "malformed", f"{RELEASE_FILE}: not a JSON object"
    if record.get("version") != release_module.RECORD_VERSION:
        return (
            None,
            "malformed",
            (
                f"{RELEASE_FILE}: record version {record.get('version')!r}, "
                f"this specfleet reads version {release_module.RECORD_VERSION}"
            ),
        )
    return record, "present", None


def read_container(section: Section | None) -> tuple[dict[str, Any] | None, str, str | None]:
    """(docker inspect of the serving container, serving state, problem).

    State is the container's own (running, exited, restarting, ...), ``absent`` when there is
    no container (or no Docker), ``unknown`` when Docker could not be asked."""
    if section is None:
        return None, "unknown", "docker inspect: no answer (the command was cut short)"
    if section.rc == "nodocker":
        return None, "absent", "docker is not installed"
    if section.rc != "0":
        if re.search(r"No such (object|container)", section.text):
            return None, "absent", None
        return None, "unknown", f"docker inspect: {_first_line(section.text)}"
    try:
        inspected = json.loads(section.text)
    except ValueError as exc:
        return None, "unknown", f"docker inspect: not valid JSON ({exc})"
    if not (isinstance(inspected, list) and inspected and isinstance(inspected[0], dict)):
        return None, "absent", None
    container = inspected[0]
    state = _mapping(container.get("State"))
    return container, str(state.get("Status") or "unknown"), None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def container_serving(container: Mapping[str, Any]) -> dict[str, Any]:
    """Image, command line and config hash of the container as started by vllm_container
    (entrypoint = args[0], command = args[1:])."""
    config = _mapping(container.get("Config"))
    entrypoint, cmd = config.get("Entrypoint"), config.get("Cmd")
    state = _mapping(container.get("State"))
    return {
        "image": config.get("Image"),
        "args": [*_as_list(entrypoint), *_as_list(cmd)],
        "config_hash": _mapping(config.get("Labels")).get(HASH_LABEL),
        "exit_code": state.get("ExitCode"),
        "started_at": state.get("StartedAt"),
        "finished_at": state.get("FinishedAt"),
    }


def _same_serving(spec: Any, running: Mapping[str, Any]) -> bool:
    return isinstance(spec, Mapping) and spec.get("image") == running["image"] and spec.get("args") == running["args"]


def identify_current(
    record: Mapping[str, Any] | None, container: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, bool | None, str | None]:
    """(summary of what the container serves, whether the container matches the record's
    ``current``, problem). The container is the truth; the record names it."""
    current_spec = _mapping(record).get("current") if record else None
    if container is None:
        if current_spec:
            return None, False, "the record says the unit serves a spec, but there is no serving container"
        return None, None, None
    running = container_serving(container)
    if _same_serving(current_spec, running):
        return spec_summary(current_spec), True, None
    known_good = _mapping(record).get("known_good") if record else None
    if _same_serving(known_good, running):
        return spec_summary(known_good), False, "the container serves the known-good spec, the record's current differs"
    speculative = speculative_of(running["args"]) or {}
    unnamed = {
        "spec_id": None,
        "kind": "speculative" if speculative else "baseline",
        "method": speculative.get("method"),
        "num_speculative_tokens": speculative.get("num_speculative_tokens"),
        "image": running["image"],
    }
    problem = "the serving container matches no spec in the release record (started by hand?)" if record else None
    return unnamed, (False if record else None), problem


def last_decision(
    record: Mapping[str, Any] | None, current_id: str | None
) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """(candidate spec id, outcome, note) of the last bench kept in the record.

    The record keys decisions by candidate and keeps no time, so "last" is: the decision for
    what is serving now (a kept candidate), else the only decision there is. With several
    and none serving, which came last cannot be told; the note says so."""
    decisions = {
        key: value for key, value in _mapping(_mapping(record).get("decisions")).items() if isinstance(value, Mapping)
    }
    if not decisions:
        return None, None, None
    if current_id in decisions:
        return current_id, dict(decisions[current_id]), None
    if len(decisions) == 1:
        key, value = next(iter(decisions.items()))
        return key, dict(value), None
    return None, None, f"{len(decisions)} decisions for other candidates; the record does not say which is last"


BENCH_FIGURES = ("speedup_c1", "tpot_p50_baseline_ms", "tpot_p50_speculative_ms", "acceptance_rate",
                 "mean_acceptance_length")


def bench_figures(outcome: Mapping[str, Any] | None) -> dict[str, Any]:
    """Key figures of an outcome, computed exactly as the fleet report does."""
    if not outcome:
        return dict.fromkeys(BENCH_FIGURES)
    try:
        row = report_module.row({**outcome, "host": ""})
    except (AttributeError, TypeError, ZeroDivisionError):  # a hand-edited record of odd shape
        return dict.fromkeys(BENCH_FIGURES)
    return {key: row[key] for key in BENCH_FIGURES}


def unit_status(read: UnitRead) -> dict[str, Any]:
    """One status row (plain JSON data) from what was read on a unit."""
    row: dict[str, Any] = {
        "host": read.host,
        "address": read.address,
        "reachable": read.error is None,
        "error": read.error,
        "serving": "unknown",
        "container": None,
        "current": None,
        "current_matches_record": None,
        "current_is_known_good": None,
        "known_good": None,
        "release_record": "unknown",
        "last": None,
        "problems": [],
        "seconds": round(read.seconds, 2) if read.seconds is not None else None,
    }
    if read.error is not None:
        return row
    problems: list[str] = []
    record, row["release_record"], problem = read_release(read.sections.get("release"))
    problems += [problem] if problem else []
    container, row["serving"], problem = read_container(read.sections.get("container"))
    problems += [problem] if problem else []
    if container is not None:
        running = container_serving(container)
        row["container"] = {key: running[key] for key in ("image", "config_hash", "exit_code", "started_at")}
    current, row["current_matches_record"], problem = identify_current(record, container)
    problems += [problem] if problem else []
    row["current"] = current
    known_good = spec_summary(_mapping(record).get("known_good")) if record else None
    row["known_good"] = known_good
    if current is not None and known_good is not None:
        current_id = current.get("spec_id")
        row["current_is_known_good"] = current_id is not None and current_id == known_good["spec_id"]
    candidate, outcome, note = last_decision(record, (current or {}).get("spec_id"))
    problems += [note] if note else []
    if outcome is not None:
        reasons = outcome.get("reasons")
        row["last"] = {
            "candidate_spec_id": candidate,
            "decision": outcome.get("decision"),
            "serving": outcome.get("serving"),
            **bench_figures(outcome),
            "reasons": [str(reason) for reason in reasons] if isinstance(reasons, list) else [],
        }
    row["problems"] = problems
    return row


def exit_code(rows: Sequence[Mapping[str, Any]]) -> int:
    """0 when every unit answered, 1 when some unit could not be reached."""
    return 0 if all(row["reachable"] for row in rows) else 1


def describe_error(exc: BaseException, target: Target, timeout: float) -> str:
    """A one-line reason a unit could not be read, for people (never a traceback)."""
    import paramiko

    where = f"{target.user + '@' if target.user else ''}{target.address}:{target.port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return f"{where}: host key differs from {target.known_hosts_file} (unit recreated? remove the old entry)"
    if isinstance(exc, paramiko.AuthenticationException):
        key = f" with key {target.key_file}" if target.key_file else ""
        return f"{where}: authentication failed{key}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        refused = any(isinstance(error, ConnectionRefusedError) for error in exc.errors.values())
        return f"{where}: connection refused" if refused else f"{where}: cannot connect ({exc})"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"{where}: no answer within {timeout:g} s"
    if isinstance(exc, FileNotFoundError) and target.key_file and exc.filename == os.path.expanduser(target.key_file):
        return f"{where}: key file {target.key_file} not found"
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return f"{where}: host key unknown (not in {target.known_hosts_file}; StrictHostKeyChecking is on)"
    if isinstance(exc, paramiko.SSHException | OSError):
        return f"{where}: {exc or type(exc).__name__}"
    return f"{where}: {type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- inventory


def _ssh_options(common_args: str) -> dict[str, str]:
    """``-o Key=Value`` options of ansible_ssh_common_args / extra_args, keys lower-cased."""
    try:
        words = shlex.split(common_args)
    except ValueError:
        return {}
    options: dict[str, str] = {}
    for index, word in enumerate(words):
        value = None
        if word == "-o" and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith("-o") and len(word) > 2:
            value = word[2:]
        if value:
            key, _, setting = value.replace(" ", "=", 1).partition("=")
            options[key.strip().lower()] = setting.strip()
    return options


def target_for(host: str, variables: Mapping[str, Any], host_key_checking: bool = True) -> Target:
    """How to reach a host, read the way Ansible's ssh connection reads its variables."""
    options = _ssh_options(
        " ".join(str(variables.get(name) or "") for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"))
    )
    strict = host_key_checking and options.get("stricthostkeychecking", "yes").lower() not in (
        "no",
        "off",
        "accept-new",
    )
    known_hosts = options.get("userknownhostsfile", "~/.ssh/known_hosts")
    key_file = variables.get("ansible_ssh_private_key_file") or variables.get("ansible_private_key_file")
    try:
        port = int(variables.get("ansible_port") or variables.get("ansible_ssh_port") or 22)
    except (TypeError, ValueError):
        port = 22
    return Target(
        host=host,
        address=str(variables.get("ansible_host") or variables.get("ansible_ssh_host") or host),
        port=port,
        user=str(variables.get("ansible_user") or variables.get("ansible_ssh_user") or "") or None,
        key_file=str(key_file) if key_file else None,
        strict_host_key=strict,
        known_hosts_file=None if known_hosts in ("/dev/null", "none") else known_hosts,
    )


def inventory_targets(inventory_path: str, limit: str | None = None) -> list[Target]:
    """Targets of every host in an inventory (or those matching an Ansible ``--limit``)."""
    from ansible import constants as ansible_constants

    from specfleet import inventory as inventory_module

    variables = inventory_module.host_variables(inventory_path)
    if limit:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader

        matching = {
            host.name for host in InventoryManager(loader=DataLoader(), sources=[inventory_path]).list_hosts(limit)
        }
        variables = {host: value for host, value in variables.items() if host in matching}
    checking = bool(ansible_constants.HOST_KEY_CHECKING)  # ansible.cfg / ANSIBLE_HOST_KEY_CHECKING
    return [target_for(host, host_vars, checking) for host, host_vars in variables.items()]


# --------------------------------------------------------------------------- I/O


def read_unit(target: Target, timeout: float = DEFAULT_TIMEOUT) -> UnitRead:
    """Connect, run the one command, disconnect. Bounded: ``timeout`` for connecting and
    authenticating, and whatever is left of it (at least 1 s) for the command."""
    import paramiko

    class _AcceptForThisConnection(paramiko.MissingHostKeyPolicy):
        # The inventory turned checking off: accept the key in memory only, never save it.
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            return None

    started = time.monotonic()
    nonce = uuid.uuid4().hex
    client = paramiko.SSHClient()
    try:
        if target.known_hosts_file:
            path = os.path.expanduser(target.known_hosts_file)
            if os.path.exists(path):
                # "System" host keys are only read, never saved back (paramiko saves only
                # the keys loaded with load_host_keys).
                client.load_system_host_keys(path)
        client.set_missing_host_key_policy(
            paramiko.RejectPolicy() if target.strict_host_key else _AcceptForThisConnection()
        )
        key_file = os.path.expanduser(target.key_file) if target.key_file else None
        if key_file and not os.path.exists(key_file):
            raise FileNotFoundError(2, "No such file", key_file)
        client.connect(
            target.address,
            port=target.port,
            username=target.user,
            key_filename=key_file,
            # An inventory key means exactly that key (IdentitiesOnly), as Ansible does.
            look_for_keys=key_file is None,
            allow_agent=key_file is None,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
        )
        left = max(1.0, timeout - (time.monotonic() - started))
        stdin, stdout, _stderr = client.exec_command(remote_command(nonce), timeout=left)
        stdin.close()
        output = stdout.read().decode("utf-8", errors="replace")
        stdout.channel.recv_exit_status()
        return UnitRead(
            target.host, target.address, sections=parse_sections(output, nonce), seconds=time.monotonic() - started
        )
    except Exception as exc:  # noqa: BLE001 - any failure of one unit is that unit's row, not a crash
        return UnitRead(
            target.host, target.address, error=describe_error(exc, target, timeout), seconds=time.monotonic() - started
        )
    finally:
        client.close()


def read_fleet(
    targets: Iterable[Target],
    timeout: float = DEFAULT_TIMEOUT,
    on_done: Callable[[UnitRead], None] | None = None,
    reader: Callable[[Target, float], UnitRead] = read_unit,
) -> list[UnitRead]:
    """Read every unit in parallel, one connection each; results in the targets' order."""
    targets = list(targets)
    if not targets:
        return []
    results: dict[str, UnitRead] = {}
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(targets))) as pool:
        futures = {pool.submit(reader, target, timeout): target for target in targets}
        for future in as_completed(futures):
            result = future.result()
            results[futures[future].host] = result
            if on_done is not None:
                on_done(result)
    return [results[target.host] for target in targets]


# --------------------------------------------------------------------------- rendering


def _fmt(value: Any, pattern: str = "{:.2f}") -> str:
    return pattern.format(value) if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _spec_text(summary: Mapping[str, Any] | None) -> str:
    if not summary:
        return "-"
    method = summary.get("method") or ("baseline" if summary.get("kind") != "speculative" else "?")
    tokens = f" k={summary['num_speculative_tokens']}" if summary.get("num_speculative_tokens") else ""
    spec_id = str(summary.get("spec_id") or "unrecorded")[:8]
    return escape(f"{method}{tokens} {spec_id}\n{short_image(summary.get('image'))}")


def short_image(image: Any) -> str:
    """An image reference without its registry (the lab mirror's address), for narrow columns."""
    if not image:
        return "-"
    first, _, rest = str(image).partition("/")
    return rest if rest and ("." in first or ":" in first or first == "localhost") else str(image)


SERVING_STYLE = {"running": "green", "exited": "red", "dead": "red", "absent": "yellow", "unknown": "yellow"}
DECISION_STYLE = {"kept": "green", "reverted": "yellow", "failed": "red"}


def _serving_text(row: Mapping[str, Any]) -> str:
    serving = row["serving"]
    exit_status = (row["container"] or {}).get("exit_code")
    if serving == "exited" and exit_status is not None:
        serving = f"exited ({exit_status})"
    style = SERVING_STYLE.get(row["serving"], "yellow")
    return f"[{style}]{escape(serving)}[/{style}]"


def _current_text(row: Mapping[str, Any]) -> str:
    mark = {True: "[green]= known-good[/green]", False: "[yellow]!= known-good[/yellow]"}.get(
        row["current_is_known_good"], ""
    )
    return _spec_text(row["current"]) + (f"\n{mark}" if mark else "")


def _last_cells(last: Mapping[str, Any] | None) -> list[str]:
    """decision, speedup, TPOT base/spec, acceptance."""
    if not last:
        return ["-", "-", "-", "-"]
    decision = last.get("decision")
    style = DECISION_STYLE.get(str(decision), "white")
    length = last.get("mean_acceptance_length")
    return [
        f"[{style}]{escape(str(decision))}[/{style}]" if decision else "-",
        _fmt(last.get("speedup_c1"), "x{:.2f}"),
        f"{_fmt(last.get('tpot_p50_baseline_ms'), '{:.1f}')} / {_fmt(last.get('tpot_p50_speculative_ms'), '{:.1f}')}",
        _fmt(last.get("acceptance_rate"), "{:.0%}") + (f" (len {_fmt(length)})" if _fmt(length) != "-" else ""),
    ]


def status_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    reachable = sum(1 for row in rows if row["reachable"])
    table = Table(title=f"specfleet status: {len(rows)} unit(s), {reachable} reachable")
    for column in (
        "host",
        "address",
        "serving",
        "current",
        "known-good",
        "last",
        "speedup c=1",
        "TPOT p50 base/spec ms",
        "acceptance",
        "problems",
    ):
        table.add_column(column, overflow="fold")
    for row in rows:
        host, address = escape(row["host"]), escape(row["address"])
        if not row["reachable"]:
            table.add_row(
                host,
                address,
                "[red]UNREACHABLE[/red]",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                f"[red]{escape(str(row['error']))}[/red]",
            )
            continue
        known_good = _spec_text(row["known_good"]) if row["known_good"] else f"- (record {row['release_record']})"
        table.add_row(
            host,
            address,
            _serving_text(row),
            _current_text(row),
            known_good,
            *_last_cells(row["last"]),
            escape("; ".join(row["problems"])) or "-",
        )
    return table
