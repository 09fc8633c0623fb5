"""`specfleet status`: what each unit serves now, its known-good serving and its last bench.

Everything is read from the unit itself in ONE remote shell command (its release record and
`docker inspect` of the serving container), so the answer is true even when the controller's
runs folder is from another machine or another day. The rollout keeps the last bench of a
candidate inside the record (``decisions``); the per-run outcome files are written on the
controller, not on the unit, so they are not read here.

Units are reached the way the playbooks reach them: ``read_fleet`` runs ``ansible`` ad hoc
once for the whole fleet (the raw module, one SSH exec per unit, no Python needed on it),
from the current directory and with the caller's environment, so the inventory's connection
variables, ~/.ssh/config (ProxyJump ...), become and vault passwords and ansible.cfg all
apply. Ansible's JSON answer (the ansible.posix.json callback) is turned into one
``UnitRead`` per unit by pure functions, and those into one row per unit. ``inventory_hosts``
lists the hosts (no connection) to check the inventory and give each row its address.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT
from rich.markup import escape
from rich.table import Table

from specfleet import release as release_module
from specfleet import report as report_module
from specfleet import serving, variables

# Where the rollout leaves things on a unit: the unit layout the modules and roles share.
RELEASE_FILE = LAYOUT["release_file"]
CONTAINER_NAME = LAYOUT["serving_container"]
TRIAL_CONTAINER_NAME = LAYOUT["trial_container"]
HASH_LABEL = LAYOUT["config_hash_label"]
SECTIONS = ("release", "container")
DEFAULT_TIMEOUT = 10.0
MAX_FORKS = 32
# Seconds for Ansible to start (and for a person to answer its password prompt, if any).
STARTUP_ALLOWANCE = 60.0
MESSAGE_LIMIT = 300


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


# --------------------------------------------------------------------------- remote command


# What status shows of the serving container, and nothing else: a whole `docker inspect` carries
# Config.Env, the serving's API key and Hugging Face token among it, which would then travel
# back through Ansible's output and any callback that logs it. The shape is inspect's own (a
# list of one container), so read_container reads either.
INSPECT_FORMAT = (
    '[{"State":{{json .State}},"Config":{"Image":{{json .Config.Image}},'
    '"Entrypoint":{{json .Config.Entrypoint}},"Cmd":{{json .Config.Cmd}},'
    '"Labels":{"' + HASH_LABEL + '":{{json (index .Config.Labels "' + HASH_LABEL + '")}}}}}]'
)


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
            # As root: Ansible's become (the record is 0600, Docker root's); a root login skips it.
            f"cat {RELEASE_FILE} 2>&1; rc=$?",
            'printf "\\n%s release %s\\n" "$N" "$rc"',
            "if command -v docker >/dev/null 2>&1; then",
            f"  docker inspect --type container --format {shlex.quote(INSPECT_FORMAT)} {CONTAINER_NAME} 2>&1; rc=$?",
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


def spec_summary(spec: Any) -> dict[str, Any] | None:
    """The short form of a serving a person compares: id, kind, method, k, image."""
    if not isinstance(spec, Mapping):
        return None
    try:
        speculation = serving.speculation(spec)
    except (AttributeError, TypeError):
        speculation = {"method": "unparsed", "num_speculative_tokens": None}
    return {
        "spec_id": spec.get("spec_id"),
        "kind": spec.get("kind"),
        "method": speculation["method"],
        "num_speculative_tokens": speculation["num_speculative_tokens"],
        "image": spec.get("image"),
    }


def read_release(section: Section | None) -> tuple[dict[str, Any] | None, str, str | None]:
    """(record, state, problem). state: present, missing, unreadable, malformed (a file the
    rollout stops on, release.UnreadableRecord, as it does)."""
    if section is None:
        return None, "unreadable", f"{RELEASE_FILE}: no answer (the command was cut short)"
    if section.rc != "0":
        if "No such file or directory" in section.text:
            return None, "missing", None
        reason = re.sub(r"^(sudo: )?cat: [^:]*: ", "", _first_line(section.text))  # the path is said once
        return None, "unreadable", f"{RELEASE_FILE}: cannot read: {reason}"
    try:
        return release_module.parse(section.text), "present", None
    except release_module.UnreadableRecord as exc:
        return None, "malformed", f"{RELEASE_FILE}: {exc}"


def interrupted_trial(record: Mapping[str, Any] | None, host: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the trial marker an interrupted rollout left, problem): the unit may serve that unvetted
    candidate until a rollout or rollback.yml puts its known-good back."""
    marker = release_module.interrupted_trial(record or {})
    if not marker:
        return None, None
    return dict(marker), (
        f"interrupted trial of {release_module.trial_sentence(marker)}: it may still serve it (or beside the "
        f"baseline, in {TRIAL_CONTAINER_NAME}); "
        f"rollout.yml or rollback.yml -l {host} returns it to its known-good"
    )


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
        # Docker's template gives "" for a label the container does not carry.
        "config_hash": _mapping(config.get("Labels")).get(HASH_LABEL) or None,
        "exit_code": state.get("ExitCode"),
        "started_at": state.get("StartedAt"),
        "finished_at": state.get("FinishedAt"),
    }


def _same_serving(spec: Any, running: Mapping[str, Any]) -> bool:
    if not isinstance(spec, Mapping) or spec.get("image") != running["image"]:
        return False
    try:
        return serving.argv(spec) == running["args"]
    except (KeyError, TypeError, AttributeError):
        return False


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
    # A container the record does not name: read what it runs from its command line, as a
    # version-1 record would have stored it.
    try:
        speculation = serving.speculation(serving.from_argv("speculative", running["image"], running["args"]))
    except (ValueError, TypeError):
        speculation = {"method": "unparsed", "num_speculative_tokens": None}
    unnamed = {
        "spec_id": None,
        "kind": "speculative" if speculation["method"] else "baseline",
        "method": speculation["method"],
        "num_speculative_tokens": speculation["num_speculative_tokens"],
        "image": running["image"],
    }
    # An interrupted rollout's candidate is on the unit until the next run or rollback.yml.
    guess = "the candidate of the interrupted trial?" if _mapping(record).get("trial") else "started by hand?"
    problem = f"the serving container matches no spec in the release record ({guess})" if record else None
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
        "trial": None,
        "last": None,
        "problems": [],
        "seconds": round(read.seconds, 2) if read.seconds is not None else None,
    }
    if read.error is not None:
        return row
    problems: list[str] = []
    record, row["release_record"], problem = read_release(read.sections.get("release"))
    problems += [problem] if problem else []
    row["trial"], problem = interrupted_trial(record, read.host)
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


# --------------------------------------------------------------------------- inventory


def _inventory_variables(host: Any) -> dict[str, Any]:
    """The inventory's own variables of a host (its groups' and its own: no group_vars files,
    nothing from a vault), so listing never needs a secret."""
    from ansible.inventory.helpers import get_group_vars
    from ansible.utils.vars import combine_vars

    try:
        return dict(combine_vars(get_group_vars(host.get_groups()), host.get_vars()))
    except Exception:  # noqa: BLE001 - an odd variable only costs the address column
        return {}


def _address(name: str, host_vars: Mapping[str, Any]) -> str:
    """The address the inventory gives a host (ansible_host), else its name; the address is
    for people, Ansible connects by itself."""
    for key in variables.HOST_VARIABLES:
        value = host_vars.get(key)
        if isinstance(value, str) and value and variables.is_literal(value):  # else Ansible's to resolve
            return value
    return name


def inventory_hosts(inventory_path: str, limit: str | None = None) -> dict[str, str]:
    """Host name -> address of every host of an inventory (or those an Ansible ``--limit``
    leaves), sorted by name. Raises what Ansible raises for an inventory it cannot parse
    (ansible.cfg's ``unparsed_is_failed`` applies, read from the current directory), and a
    ValueError naming each host and variable whose connection settings ssh would misread (a
    host name or address starting with '-' is an ssh option: variables.connection_problems)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    inventory = InventoryManager(loader=DataLoader(), sources=[inventory_path])
    if limit:
        inventory.subset(limit)
    hosts = sorted(inventory.get_hosts("all"), key=lambda host: host.name)
    found = {host.name: _inventory_variables(host) for host in hosts}
    problems = [problem for name, host_vars in found.items()
                for problem in variables.connection_problems(name, host_vars, templated_ok=True)]
    problems += variables.same_unit_problems({name: variables.destination_of(name, host_vars)
                                              for name, host_vars in found.items()})
    if problems:
        raise ValueError("; ".join(problems))
    return {name: _address(name, host_vars) for name, host_vars in found.items()}


# --------------------------------------------------------------------------- Ansible's answer


class AnsibleRunError(RuntimeError):
    """Ansible ran but reported nothing for any host (bad option, vault, crash)."""


def forks_for(hosts: int) -> int:
    return max(1, min(MAX_FORKS, hosts))


def task_timeout(timeout: float) -> int:
    """Seconds for one unit's whole task (connect, authenticate, become, run): the connection
    gets ``timeout`` (``-T``), the command as long again."""
    return max(2, math.ceil(2 * timeout))


def run_timeout(timeout: float, hosts: int) -> float:
    """The bound of the whole ``ansible`` run: Ansible's start (and a password prompt, if the
    configuration asks for one) plus one task timeout per batch of forks."""
    return STARTUP_ALLOWANCE + math.ceil(hosts / forks_for(hosts)) * (task_timeout(timeout) + 5)


def untemplated(command: str) -> str:
    """``command`` as Ansible's ad hoc ``-a`` passes it on unchanged: Ansible templates module
    arguments, and the command's braces (docker's --format) are its own, so all but its first
    word sits in a Jinja2 raw block (the first word keeps -a from starting with '{', which ad
    hoc would read as JSON)."""
    first, _, rest = command.partition(" ")
    if "{" in first or "endraw" in rest:
        raise ValueError("a command Ansible would template: braces in its first word, or a raw block's end")
    return f"{first} {{% raw %}}{rest}{{% endraw %}}" if rest else first


def ansible_argv(
    inventory_path: str, limit: str | None, command: str, timeout: float, hosts: int, executable: str = "ansible",
    verbosity: int = 0,
) -> list[str]:
    """``ansible`` ad hoc: the raw module runs ``command`` through the unit's shell in one SSH
    exec, with no Python or module upload on the unit; with become, as the playbooks' unit
    plays (the inventory's or Vault's sudo password, or -K's prompt through ansible.cfg's
    become_ask_pass); Ansible skips it where the login is root."""
    argv = [executable, "all", "-i", inventory_path]
    if limit:
        argv += ["--limit", limit]
    return argv + [
        "-m", "ansible.builtin.raw",
        "-a", untemplated(command),
        "--become",
        "-T", str(max(1, math.ceil(timeout))),
        "--task-timeout", str(task_timeout(timeout)),
        "--forks", str(forks_for(hosts)),
        *([f"-{'v' * verbosity}"] if verbosity else []),
    ]


# Results as JSON on stdout, whatever ansible.cfg's stdout_callback says.
ANSIBLE_ENV = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}


def ansible_document(stdout: str) -> tuple[dict[str, Any], tuple[int, int]] | None:
    """The ansible.posix.json document in ``stdout`` and where it sits. Other callbacks
    ansible.cfg enables, and -v, print around it (ansible.posix.timer prints after it), so it
    is found, not assumed."""
    decoder = json.JSONDecoder()
    for found in re.finditer(r"^\{", stdout, re.MULTILINE):
        try:
            document, end = decoder.raw_decode(stdout, found.start())
        except ValueError:
            continue
        if isinstance(document, dict) and "plays" in document:
            return document, (found.start(), end)
    return None


def host_results(document: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Host -> its result of the (one) ad hoc task."""
    results: dict[str, Mapping[str, Any]] = {}
    for play in document.get("plays") or []:
        for task in _mapping(play).get("tasks") or []:
            for host, result in _mapping(_mapping(task).get("hosts")).items():
                results[str(host)] = _mapping(result)
    return results


_NOISE = re.compile(r"^(Warning: Permanently added |@+$|@ |>>> |\(traceback unavailable\))")


def _message_lines(result: Mapping[str, Any]) -> list[str]:
    text = str(result.get("msg") or "")
    text = re.sub(r"^Task failed: ", "", text)
    text = re.sub(r"^Failed to connect to the host via \w+: ", "", text)
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines()]
    return [line for line in lines if line and not _NOISE.match(line)]


def _line_with(lines: Sequence[str], *needles: str) -> str | None:
    return next((line for line in lines if any(needle.lower() in line.lower() for needle in needles)), None)


def describe_failure(result: Mapping[str, Any]) -> str:
    """One line for a host Ansible reported unreachable or failed: the kind of failure (host
    key changed, host key unknown, authentication failed, become failed, address not resolved,
    connection refused, timeout, command failed), then Ansible's own most telling line.
    Never a traceback: Ansible's ``exception`` field is not read."""
    lines = _message_lines(result)
    lowered = str(result.get("msg") or "").lower()
    if "remote host identification has changed" in lowered or "has changed and you have requested strict" in lowered:
        kind = "host key changed"
        detail = _line_with(lines, "Offending") or _line_with(lines, "has changed") or "Host key verification failed."
        remove = _line_with(lines, "ssh-keygen")
        detail += f" (unit recreated? {remove})" if remove else ""
    elif "host key verification failed" in lowered:
        kind, detail = "host key unknown", _line_with(lines, "host key is known", "Host key verification")
    elif "permission denied" in lowered and result.get("unreachable"):
        kind, detail = "authentication failed", _line_with(lines, "Permission denied")
    elif any(word in lowered for word in ("become", "sudo password", "privilege escalation", "incorrect su")):
        # The become tool's own words (sudo: a password is required) come last.
        kind, detail = "become failed", lines[-1] if lines else None
    elif "could not resolve hostname" in lowered:
        kind, detail = "address not resolved", _line_with(lines, "Could not resolve")
    elif "connection refused" in lowered:
        kind, detail = "connection refused", _line_with(lines, "Connection refused")
    elif "timed out" in lowered or result.get("timedout"):
        kind, detail = "timeout", _line_with(lines, "timed out")
    elif result.get("rc") not in (None, 0):
        kind = f"command failed (rc {result.get('rc')})"
        output = f"{result.get('stderr') or ''}\n{result.get('stdout') or ''}"
        detail = _first_line(output.replace("\r", "")) if output.strip() else None
    elif result.get("unreachable"):
        kind, detail = "unreachable", lines[0] if lines else None
    else:
        kind, detail = "failed", lines[0] if lines else None
    return f"{kind}: {detail or 'no message'}"[:MESSAGE_LIMIT]


def reads_from_ansible(
    document: Mapping[str, Any], nonce: str, addresses: Mapping[str, str], seconds: float | None = None
) -> list[UnitRead]:
    """One UnitRead per host, in ``addresses``' order (then any host only Ansible named):
    stdout of a successful run parsed into sections, anything else an ``error``. ``seconds``
    is the one Ansible run's time, the same for every unit."""
    results = host_results(document)
    reads: list[UnitRead] = []
    for host in [*addresses, *(host for host in results if host not in addresses)]:
        address = addresses.get(host, host)
        result = results.get(host)
        if result is None:
            reads.append(UnitRead(host, address, error="no result: Ansible did not report this host", seconds=seconds))
        elif result.get("unreachable") or result.get("failed") or result.get("skipped") or "stdout" not in result:
            reads.append(UnitRead(host, address, error=describe_failure(result), seconds=seconds))
        else:
            sections = parse_sections(str(result.get("stdout") or ""), nonce)
            reads.append(UnitRead(host, address, sections=sections, seconds=seconds))
    return reads


def _ansible_error(stderr: str, returncode: int) -> str:
    """Ansible's own error line(s) from its stderr (``[ERROR]: ...``), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    return " ".join(errors[:2]) or (lines[-1] if lines else f"ansible exited {returncode} and printed nothing")


# --------------------------------------------------------------------------- I/O


def ansible_executable() -> str:
    """The ``ansible`` of this Python's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("ansible")
    return str(beside) if beside.exists() else (shutil.which("ansible") or "ansible")


@dataclass(frozen=True)
class FleetRead:
    reads: list[UnitRead]
    argv: list[str]
    stderr: str
    seconds: float
    # What Ansible printed besides its JSON answer (its -v lines, other callbacks' output).
    chatter: str = ""


def read_fleet(
    inventory_path: str,
    addresses: Mapping[str, str],
    limit: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    verbosity: int = 0,
) -> FleetRead:
    """Read every unit with ONE ``ansible`` ad hoc run of the raw module, from the current
    directory (so its ansible.cfg applies) and with this process's environment and terminal
    (so ~/.ssh/config, ProxyJump, become and vault passwords, and their prompts, are exactly
    the playbooks'). ``addresses`` (from ``inventory_hosts``) orders the rows and sizes the
    forks. Raises AnsibleRunError when Ansible reports no host at all."""
    nonce = uuid.uuid4().hex
    argv = ansible_argv(inventory_path, limit, remote_command(nonce), timeout, len(addresses), ansible_executable(),
                        verbosity)
    bound = run_timeout(timeout, len(addresses))
    started = time.monotonic()
    try:
        # stdin stays this process's: Ansible prompts for a become or vault password on the
        # terminal when its configuration asks for one.
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace",
            env={**os.environ, **ANSIBLE_ENV}, timeout=bound, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        seconds = time.monotonic() - started
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        error = f"timeout: ansible did not finish within {bound:g} s"
        reads = [UnitRead(host, address, error=error, seconds=seconds) for host, address in addresses.items()]
        return FleetRead(reads, argv, stderr, seconds)
    except OSError as exc:  # no ansible to run
        raise AnsibleRunError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    seconds = time.monotonic() - started
    found = ansible_document(done.stdout)
    if found is None or not host_results(found[0]):
        raise AnsibleRunError(_ansible_error(done.stderr, done.returncode))
    document, (start, end) = found
    return FleetRead(reads_from_ansible(document, nonce, addresses, seconds), argv, done.stderr, seconds,
                     chatter=done.stdout[:start] + done.stdout[end:])


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
    trial = "\n[red]interrupted trial[/red]" if row.get("trial") else ""
    return f"[{style}]{escape(serving)}[/{style}]{trial}"


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
