"""The one schema of specfleet_* variable names: a misspelt one is an error, not a default.

An inventory that says ``specfleet_spec_token: 2`` would otherwise plan with the default
draft length and nobody would know. Every name a host sets under the ``specfleet_`` prefix
must be a policy variable (data/policy.yml), a role variable (each role's
meta/argument_specs.yml or defaults/main.yml), a public variable of data/variables.yml, or
one the collection's plays set for themselves (also data/variables.yml); anything else is
reported with the closest known name. The public variables' types are checked here too;
secrets are checked without ever echoing their value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils import unit_layout

PREFIX = "specfleet_"
# What a problem line may quote of a value: a 1 MB variable is not echoed back whole.
SHOWN_CHARS = 80
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Environment names that carry credentials; they belong in specfleet_serve_secret_env,
# which is kept out of the container's recorded spec and every log.
_SECRET_ENV_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY$|API_?KEY|PRIVATE)", re.I)
_PERCENT = re.compile(r"^\d{1,3}(\.\d+)?%$")


def shown(value: Any) -> str:
    """``repr(value)`` cut to SHOWN_CHARS, saying how long the whole was."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def kind_of(value: Any) -> str:
    """What a value is, in words, without showing it (Ansible wraps values in its own types)."""
    if isinstance(value, bool):
        return "true/false"
    for kind, name in ((str, "text"), (Mapping, "a map"), (list | tuple, "a list"), (int | float, "a number")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return yaml.safe_load(resources.files("specfleet.data").joinpath("variables.yml").read_text())


def public() -> dict[str, dict[str, Any]]:
    return dict(schema()["public"])


def role_variable_names(roles_dir: Path) -> set[str]:
    """Every variable a project role declares: its argument spec's options and its defaults."""
    names: set[str] = set()
    for role in sorted(roles_dir.glob(f"{PREFIX}*")):
        spec = role / "meta" / "argument_specs.yml"
        if spec.is_file():
            entry_points = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs") or {}
            for entry in entry_points.values():
                names.update((entry or {}).get("options") or {})
        defaults = role / "defaults" / "main.yml"
        if defaults.is_file():
            names.update(yaml.safe_load(defaults.read_text()) or {})
    return {name for name in names if name.startswith(PREFIX)}


def collection_roles_dir() -> Path:
    """The roles of the specfleet.fleet collection this package runs with."""
    return Path(unit_layout.__file__).resolve().parents[2] / "roles"


def known_names(policy_names: Iterable[str], roles_dir: Path | None = None) -> set[str]:
    roles = role_variable_names(roles_dir or collection_roles_dir())
    return set(policy_names) | roles | set(public()) | set(schema()["internal"])


def closest(name: str, candidates: Iterable[str]) -> str:
    """"; did you mean X?" for the candidate nearest to a misspelt ``name``, else ""."""
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_problems(names: Iterable[str], known: set[str]) -> list[str]:
    """One problem per ``specfleet_*`` name, in any case, that is not known, with the closest
    known name. Variable names are case-sensitive, so ``-e SPECFLEET_SPEC_TOKENS=2`` would be
    ignored without a word; it is refused like a misspelling."""
    lab = schema()["lab_prefix"]
    removed = schema().get("removed") or {}
    problems = []
    for name in sorted(set(names)):
        folded = name.lower()
        if not folded.startswith(PREFIX) or folded == lab or folded.startswith(f"{lab}_") or name in known:
            continue
        if name in removed:
            problems.append(f"{name}: {removed[name]}")
            continue
        public = known - set(schema()["internal"])
        if folded in public:
            problems.append(f"{name}: variable names are case-sensitive; did you mean {folded}?")
            continue
        hint = closest(folded, public) or "; see specfleet/data/policy.yml and the roles' defaults"
        problems.append(f"{name}: not a specfleet variable{hint}")
    return problems


def env_problems(name: str, value: Any, *, secret: bool) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{name}: must be a map of environment variable name -> value, "
                f"got {kind_of(value) if secret else shown(value)}"]
    problems = []
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            problems.append(f"{name}: {shown(key)} is not an environment variable name")
        elif secret and not isinstance(item, str):
            problems.append(f"{name}.{key}: must be a string (from Ansible Vault or the environment)")
        elif not secret and _SECRET_ENV_NAME.search(key):
            problems.append(
                f"{name}.{key}: looks like a secret; set it in specfleet_serve_secret_env (from Ansible Vault), "
                "which stays out of the release record and every log")
        elif not secret and (not isinstance(item, str | int | float) or isinstance(item, bool)):
            problems.append(f"{name}.{key}: must be a string or a number, got {shown(item)}")
    return problems


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def is_integer(value: Any) -> bool:
    """An int (Ansible's tagged ints included), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (YAML's true is an int to Python)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_integer(value: Any) -> int | None:
    """``value`` as Ansible reads an integer option: an int, or digits given as text (what
    ``-e name=5`` passes); None otherwise."""
    if is_integer(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def as_bool(value: Any) -> bool | None:
    """``value`` as Ansible's strict boolean reads it (``-e name=true`` passes text); None
    when it is neither."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    return True if text in _TRUE else False if text in _FALSE else None


def _count_problem(name: str, value: Any, minimum: int) -> str | None:
    number = as_integer(value)
    if number is None or number < minimum:
        return f"{name}: must be an integer >= {minimum}, got {shown(value)}"
    return None


def _serial_problem(name: str, value: Any) -> str | None:
    steps = value if isinstance(value, list) and value else [value]
    for step in steps:
        number = as_integer(step)
        if number is not None and number >= 1:
            continue
        if isinstance(step, str) and _PERCENT.match(step) and 0 < float(step[:-1]) <= 100:
            continue
        return f"{name}: must be a count >= 1, a percentage like '25%', or a list of them, got {shown(value)}"
    return None


def public_problems(values: Mapping[str, Any]) -> list[str]:
    """Type problems of the public variables among ``values`` (a host's, templated)."""
    problems: list[str] = []
    for name, entry in public().items():
        if name not in values:
            continue
        value, kind = values[name], entry["type"]
        problem: str | None = None
        if kind == "secret":
            if not isinstance(value, str):
                problem = f"{name}: must be a string (from Ansible Vault or the environment), got {kind_of(value)}"
        elif kind == "env":
            problems += env_problems(name, value, secret=False)
        elif kind == "bool":
            if as_bool(value) is None:
                problem = f"{name}: must be true or false, got {shown(value)}"
        elif kind == "name":
            if not is_file_name(value):
                problem = (f"{name}: must be a name of letters, digits, '.', '_' or '-' (it becomes a folder name), "
                           f"got {shown(value)}")
        elif kind in ("path", "host"):
            if not isinstance(value, str) or not value.strip():
                problem = f"{name}: must be a non-empty string, got {shown(value)}"
            else:
                problem = one_line_problem(name, value)
        elif kind == "count":
            problem = _count_problem(name, value, int(entry.get("min", 0)))
        elif kind == "percent":
            number = as_integer(value) if isinstance(value, str) else value
            if not is_number(number) or not 0 <= number <= 100:
                problem = f"{name}: must be a percentage 0..100, got {shown(value)}"
        elif kind == "serial":
            problem = _serial_problem(name, value)
        if problem:
            problems.append(problem)
    return problems


# A string written into a line of a file or command (an apt source, a unit file, an image
# reference) must not start another line there.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line_problem(name: str, value: Any) -> str | None:
    """Why string ``value`` of ``name`` is not one line, else None."""
    if isinstance(value, str) and _CONTROL.search(value):
        return f"{name}: {shown(value)} has a line break or control character; it must be one line"
    return None


def is_literal(value: Any) -> bool:
    """A value as written, not Ansible's to resolve: a str or an int without a Jinja2 template
    (a vaulted value is neither: Ansible's EncryptedString)."""
    return isinstance(value, str | int) and not (isinstance(value, str) and "{{" in value)


# A path on a unit is written into shell commands and into authorized_keys' forced command.
_UNIT_PATH_UNSAFE = re.compile(r"[\x00-\x1f\x7f'\"`\\]")


def unit_path_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be a path on a unit, named ``name``, else None."""
    if isinstance(value, str) and _UNIT_PATH_UNSAFE.search(value):
        return (f"{name}: {shown(value)} has a quote, backslash or control character; a path on a unit is "
                "written into shell commands and authorized_keys lines")
    return None


def is_file_name(value: Any) -> bool:
    """A name that is one file name in its folder: no slash, no ``..``, no leading dot or dash."""
    return isinstance(value, str) and bool(_NAME.match(value))


def host_name_problem(host: Any) -> str | None:
    """Why an inventory host name cannot name a unit's files (report, records), or None.

    Host names become file names on the controller (the run's units/<host>.json, rendered
    manifests): a name with a slash or ``..`` would write outside its folder."""
    if is_file_name(host):
        return None
    return (f"inventory_hostname: {shown(host)} is not a usable unit name (letters, digits, '.', '_' or '-', "
            "up to 128, not starting with '.' or '-'); set ansible_host for the address")


# A host name or an address as ssh takes one (DNS name, IPv4, IPv6 with an optional zone; ssh
# takes no brackets): never empty, never starting with '-' (ssh would read an option), nothing a
# shell or an ssh_config line could split on.
_ADDRESS = re.compile(r"^[A-Za-z0-9_:][A-Za-z0-9_.:%-]{0,252}$")
# A login name as useradd takes it (Samba's trailing '$'), or a domain login (user@domain),
# never starting with '-'.
_LOGIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}\$?$")
# Ansible's names for where to connect, in its precedence, then the fan-out's for its peers.
HOST_VARIABLES = ("ansible_host", "ansible_ssh_host")
HOST_PORT_VARIABLES = ("ansible_port", "ansible_ssh_port")
ADDRESS_VARIABLES = (*HOST_VARIABLES, "specfleet_fanout_address")
PORT_VARIABLES = (*HOST_PORT_VARIABLES, "specfleet_fanout_port")
USER_VARIABLES = ("ansible_user", "ansible_ssh_user", "ansible_remote_user")
KEY_VARIABLES = ("ansible_ssh_private_key_file", "ansible_private_key_file")


def connection_problems(host: Any, host_vars: Mapping[str, Any], templated_ok: bool = False) -> list[str]:
    """Why a host's connection settings cannot reach ssh or rsync as given, each naming the host
    and the variable; [] when they can. The commands that connect themselves (distribute,
    hostkeys) and status, which hands the inventory to Ansible, check every host first: a host
    name or address starting with '-' is an ssh option, not a destination. ``templated_ok``: a
    value holding a Jinja2 template, or a vaulted one (status reads no vault), is Ansible's to
    resolve there, not a literal address."""
    problems = []
    named = host_name_problem(host)
    if named:
        problems.append(named)
    where = f"host {shown(host)}" if named else str(host)

    for names, fits, wrong in _CONNECTION_CHECKS:
        for name in names:
            value = host_vars.get(name)
            if value is not None and (not templated_ok or is_literal(value)) and not fits(value):
                problems.append(f"{where}: {name}: {wrong.format(value=shown(value))}")
    return problems


def _port_fits(value: Any) -> bool:
    number = as_integer(value) if isinstance(value, str) else value
    return is_integer(number) and 1 <= number <= 65535


# (variables, whether a value fits, what a value that does not is) for connection_problems.
_CONNECTION_CHECKS: tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...] = (
    (ADDRESS_VARIABLES, lambda value: isinstance(value, str) and bool(_ADDRESS.match(value)),
     "{value} is not a host name or address (letters, digits, '.', '_', ':', '%' or '-', not starting with '-')"),
    (PORT_VARIABLES, _port_fits, "must be a port number 1..65535, got {value}"),
    (USER_VARIABLES, lambda value: isinstance(value, str) and bool(_LOGIN.match(value)),
     "{value} is not a login name (letters, digits, '.', '_', '@' or '-', not starting with '-')"),
    (KEY_VARIABLES, lambda value: isinstance(value, str) and bool(value) and not any(c in value for c in "\n\r\0"),
     "must be a file path on one line, got {value}"),
)


def first_set(host_vars: Mapping[str, Any], names: Iterable[str], default: Any = None) -> Any:
    """The value of the first of ``names`` (Ansible's aliases, in its precedence) a host sets,
    else ``default``."""
    return next((host_vars[name] for name in names if host_vars.get(name) is not None), default)


def port_of(host_vars: Mapping[str, Any], *names: str, default: int = 22) -> int:
    """The first of ``names`` set (checked by connection_problems), else ``default``."""
    return int(first_set(host_vars, names, default))


def destination_of(host: str, host_vars: Mapping[str, Any]) -> tuple[str, int] | None:
    """The (address, port) ssh reaches ``host`` at, the address folded to lower case; None where
    a value is Ansible's to resolve (a template or a vaulted value) or no port, and for a host Ansible runs
    on the controller itself (``ansible_connection: local``)."""
    if host_vars.get("ansible_connection") == "local":
        return None
    address = first_set(host_vars, HOST_VARIABLES, host)
    port = first_set(host_vars, HOST_PORT_VARIABLES, 22)
    if not (is_literal(address) and is_literal(port)):
        return None
    if not _port_fits(port):
        return None  # connection_problems names it
    return str(address).lower(), int(port)


def same_unit_problems(destinations: Mapping[str, tuple[str, int] | None], involving: str | None = None
                       ) -> list[str]:
    """One problem per unit that two or more inventory hosts reach (the same address and port),
    only the one ``involving`` that host if given: a unit listed twice would be prepared,
    restarted and measured by two hosts at once, each reverting the other's serving."""
    hosts_by_unit: dict[tuple[str, int], list[str]] = {}
    for host, destination in sorted(destinations.items()):
        if destination is not None:
            hosts_by_unit.setdefault(destination, []).append(host)
    return [f"hosts {', '.join(map(shown, hosts))}: the same unit ({address} port {port}) listed twice; "
            "keep one host per unit" for (address, port), hosts in hosts_by_unit.items()
            if len(hosts) > 1 and (involving is None or involving in hosts)]


def unit_file(folder: Path, host: str, suffix: str) -> Path:
    """``folder/<host><suffix>``, refusing a host name that would leave ``folder``."""
    problem = host_name_problem(host)
    if problem:
        raise ValueError(problem)
    return folder / f"{host}{suffix}"
