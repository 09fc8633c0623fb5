# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Is the unit already as a role leaves it? The checks behind the ``unit_state`` module.

A prepare role lists what it leaves on a unit as checks (plain dicts, one ``kind`` each) and
asks them all in one module round trip; when every check holds, the role skips its own tasks.
A no-change re-run then costs one round trip per role instead of one per task.

The checks are strict: anything they cannot read or are unsure of does not hold, and the
role's own tasks (which stay the authority on what to change) run and decide. A check never
changes anything. Standard library only, as every module_utils file the units run.

Kinds (and their fields):

- ``file``: ``path``; optional ``sha256`` (of the content), ``same_as`` (a path: the same
  bytes as that file, or, when it does not exist, the ``sha256``), ``owner``, ``group``,
  ``mode`` (octal string), ``mine`` (owned by the account the module runs as)
- ``directory``: ``path``; optional ``owner``, ``group``, ``mode``, ``mine``
- ``absent``: ``path`` (nothing there, not even a dangling link)
- ``link``: ``path``, ``src`` (the link's text, as ``ln -s`` was given it)
- ``packages``: ``names`` (dpkg says each is installed)
- ``executable``: ``name`` (a path, or a name found on PATH, as ``command -v``)
- ``service``: ``name`` (running: systemd's ``is-active``, else the init script's ``status``)
- ``dockerd``: ``path`` (daemon.json), ``pidfile``: the running dockerd loaded the file as
  it is now (detail: the file's text, or None)
- ``docker_runtime``: ``name``, ``default``: ``docker info`` lists the runtime (and, unless
  ``default`` is empty, reports it as the default)
- ``group_members``: ``group``, ``users`` (each a member)
- ``docker_image``: ``ref``; optional ``digest`` (``sha256:...``, among its RepoDigests)
- ``store``: ``root``, ``subdir``, ``manifest``: the live store is the manifest's version,
  verified by size, with no stale versions left (detail: the inspection)
- ``room``: ``needs`` (a list of ``path`` and ``bytes``); optional ``spare`` (bytes): each
  filesystem has room for what goes on it, the needs of paths on one filesystem added up,
  plus ``spare`` (a path that does not exist yet counts on the filesystem it would land on;
  detail: per filesystem its paths, free and needed bytes)
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
from collections.abc import Callable

from ansible_collections.specfleet.fleet.plugins.module_utils.dockerd_config import loaded, running_dockerd
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
    StoreLayout,
    existing_ancestor,
    free_bytes,
    inspect_store,
    sha256_file,
)

# (argv) -> (rc, stdout, stderr): the module's run_command, or a test's.
Runner = Callable[[list], tuple]

# Each kind's required fields: a check without them is the role's mistake, not the unit's.
REQUIRED = {
    "file": ("path",),
    "directory": ("path",),
    "absent": ("path",),
    "link": ("path", "src"),
    "packages": ("names",),
    "executable": ("name",),
    "service": ("name",),
    "dockerd": ("path", "pidfile"),
    "docker_runtime": ("name",),
    "group_members": ("group", "users"),
    "docker_image": ("ref",),
    "store": ("root", "manifest"),
    "room": ("needs",),
}


def _name_of(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _group_of(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return None


def attributes_differ(observed: os.stat_result, check: dict) -> list[str]:
    """What of owner, group and mode differs from the check (empty: all as wanted)."""
    differ = []
    owner = _name_of(os.geteuid()) if check.get("mine") else check.get("owner")
    if owner and _name_of(observed.st_uid) != owner:
        differ.append(f"owner {_name_of(observed.st_uid)} (wanted {owner})")
    if check.get("group") and _group_of(observed.st_gid) != check["group"]:
        differ.append(f"group {_group_of(observed.st_gid)} (wanted {check['group']})")
    if check.get("mode") and stat.S_IMODE(observed.st_mode) != int(str(check["mode"]), 8):
        differ.append(f"mode {stat.S_IMODE(observed.st_mode):04o} (wanted {check['mode']})")
    return differ


def check_path(check: dict) -> tuple[bool, str]:
    """``file``, ``directory``, ``absent`` and ``link``: one lstat (links are not followed)."""
    kind, path = check["kind"], check["path"]
    try:
        observed = os.lstat(path)
    except FileNotFoundError:
        return kind == "absent", "absent"
    if kind == "absent":
        return False, "present"
    if kind == "link":
        if not stat.S_ISLNK(observed.st_mode):
            return False, "not a symlink"
        target = os.readlink(path)
        return target == check["src"], f"-> {target}"
    wanted_type = stat.S_ISREG if kind == "file" else stat.S_ISDIR
    if not wanted_type(observed.st_mode):
        return False, f"not a {kind}"
    differ = attributes_differ(observed, check)
    if kind == "file":
        wanted = check.get("sha256")
        if check.get("same_as") and os.path.exists(check["same_as"]):
            wanted = sha256_file(check["same_as"])
        if wanted and sha256_file(path) != wanted:
            differ.append("content differs")
    return not differ, "; ".join(differ) or "as wanted"


def dpkg_missing(names: list[str], dpkg_output: str) -> list[str]:
    """The packages, in their order, dpkg does not have installed, from
    `dpkg-query --show --showformat '${Package} ${db:Status-Status}\\n' NAME...` (which prints
    nothing for a name it never saw, and `config-files` for a removed one). An
    architecture-qualified name (rsync:arm64) is read by its package name."""
    installed = set()
    for line in dpkg_output.splitlines():
        name, _, status = line.strip().partition(" ")
        if status.strip() == "installed":
            installed.add(name)
    return [name for name in names if name.split(":", 1)[0] not in installed]


def check_packages(check: dict, run: Runner) -> tuple[bool, list[str]]:
    names = list(check["names"])
    if not names:
        return True, []
    if shutil.which("dpkg-query") is None:
        return False, names
    _, out, _ = run(["dpkg-query", "--show", "--showformat", "${Package} ${db:Status-Status}\n", *names])
    missing = dpkg_missing(names, out)
    return not missing, missing


def check_service(check: dict, run: Runner) -> tuple[bool, str]:
    name = check["name"]
    if os.path.isdir("/run/systemd/system") and shutil.which("systemctl"):
        argv = ["systemctl", "is-active", "--quiet", name]
    elif os.path.exists(f"/etc/init.d/{name}"):
        argv = [f"/etc/init.d/{name}", "status"]
    else:
        return False, "no systemd unit or init script to ask"
    rc, _, _ = run(argv)
    return rc == 0, "running" if rc == 0 else f"not running ({' '.join(argv)}: {rc})"


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def check_dockerd(check: dict) -> tuple[bool, dict]:
    """Loaded as the file is now, by the dockerd of the pidfile the file names (else the
    check's). The detail carries the text, which the role merges its settings into."""
    path = check["path"]
    content = _read_text(path) if os.path.exists(path) else None
    pidfile = check["pidfile"]
    try:
        named = json.loads(content).get("pidfile") if content else None
    except (ValueError, AttributeError):
        named = None
    if isinstance(named, str) and named:
        pidfile = named
    try:
        written = os.stat(path).st_mtime
    except FileNotFoundError:
        written = None
    pid, started = running_dockerd(pidfile)
    is_loaded, reason = loaded(path, written, pid, started)
    exists = os.path.exists(path)
    return is_loaded and (content is not None or not exists), {"content": content, "reason": reason}


def _docker_json(run: Runner, argv: list[str]) -> object | None:
    if shutil.which("docker") is None:
        return None
    rc, out, _ = run(argv)
    if rc != 0:
        return None
    try:
        return json.loads(out)
    except ValueError:
        return None


def check_docker_runtime(check: dict, run: Runner) -> tuple[bool, str]:
    info = _docker_json(run, ["docker", "info", "--format", "{{json .}}"])
    if not isinstance(info, dict):
        return False, "docker info did not answer"
    runtimes = sorted(info.get("Runtimes") or {})
    default = info.get("DefaultRuntime")
    holds = check["name"] in runtimes and (not check.get("default") or default == check["default"])
    return holds, f"runtimes {runtimes}, default {default}"


def check_group_members(check: dict) -> tuple[bool, list[str]]:
    """Each of ``users`` in ``group`` (listed in it, or its primary group); the detail names
    those who are not."""
    users = list(check["users"])
    try:
        group = grp.getgrnam(check["group"])
    except KeyError:
        return not users, users
    outside = []
    for user in users:
        try:
            primary = pwd.getpwnam(user).pw_gid
        except KeyError:
            primary = None
        if user not in group.gr_mem and primary != group.gr_gid:
            outside.append(user)
    return not outside, outside


def check_docker_image(check: dict, run: Runner) -> tuple[bool, dict]:
    found = _docker_json(run, ["docker", "image", "inspect", check["ref"]])
    if not isinstance(found, list) or not found:
        return False, {"id": None, "repo_digests": []}
    digests = [d for image in found for d in (image.get("RepoDigests") or [])]
    holds = not check.get("digest") or any(d.endswith("@" + check["digest"]) for d in digests)
    return holds, {"id": found[0].get("Id"), "repo_digests": digests}


def check_store(check: dict) -> tuple[bool, dict]:
    manifest = check["manifest"]
    layout = StoreLayout(check["root"], check.get("subdir", ""), manifest["name"])
    inspected = inspect_store(layout, manifest, full=False)
    return inspected["up_to_date"] and not inspected["stale_versions"], inspected


def check_room(check: dict) -> tuple[bool, list[dict]]:
    """Room on each filesystem the needs land on (one ``st_dev``: one filesystem, whose
    needs add up: a tarball's parts and the image Docker loads from them on one disk take
    twice the image)."""
    spare = int(check.get("spare") or 0)
    filesystems: dict[int, dict] = {}
    for need in check["needs"]:
        path = str(need["path"])
        where = existing_ancestor(path)
        entry = filesystems.setdefault(os.stat(where).st_dev, {"paths": [], "free": free_bytes(where), "needed": spare})
        entry["paths"].append(path)
        entry["needed"] += int(need["bytes"])
    detail = list(filesystems.values())
    return all(entry["free"] >= entry["needed"] for entry in detail), detail


def executable_found(name: str) -> bool:
    if os.sep in name:
        return os.path.isfile(name) and os.access(name, os.X_OK)
    return shutil.which(name) is not None


def malformed(check: dict) -> str | None:
    """Why a check cannot be asked (an unknown kind, a required field missing), or None."""
    kind = check.get("kind")
    if kind not in REQUIRED:
        return f"unknown check kind {kind!r}; one of {', '.join(REQUIRED)}"
    missing = [field for field in REQUIRED[kind] if check.get(field) in (None, "")]
    return f"a {kind} check needs {', '.join(missing)}: {check}" if missing else None


def check_one(check: dict, run: Runner) -> tuple[bool, object]:
    """(holds, detail) of one well-formed check."""
    kind = check["kind"]
    if kind in ("file", "directory", "absent", "link"):
        return check_path(check)
    if kind == "packages":
        return check_packages(check, run)
    if kind == "executable":
        found = executable_found(check["name"])
        return found, "found" if found else "not found"
    if kind == "service":
        return check_service(check, run)
    if kind == "dockerd":
        return check_dockerd(check)
    if kind == "docker_runtime":
        return check_docker_runtime(check, run)
    if kind == "group_members":
        return check_group_members(check)
    if kind == "docker_image":
        return check_docker_image(check, run)
    if kind == "room":
        return check_room(check)
    return check_store(check)


def subject(check: dict) -> str:
    """What a check is about, for its result and for people."""
    for field in ("path", "name", "ref", "group"):
        if check.get(field):
            return str(check[field])
    if check.get("names") is not None:
        return " ".join(check["names"])
    if check.get("manifest"):
        return str(check["manifest"].get("name"))
    if check.get("needs"):
        return " ".join(str(need.get("path")) for need in check["needs"])
    return str(check.get("kind"))


def evaluate(checks: list[dict], run: Runner) -> dict:
    """Every check's (kind, subject, holds, detail), and whether all hold.

    A check whose reading fails (a permission, a vanished file) does not hold: the role's
    tasks then run and say what is wrong. A malformed check raises ValueError before any is
    asked."""
    problems = [problem for problem in map(malformed, checks) if problem]
    if problems:
        raise ValueError("; ".join(problems))
    results = []
    for check in checks:
        try:
            holds, detail = check_one(check, run)
        except (OSError, KeyError, TypeError, ValueError) as exc:
            holds, detail = False, f"could not read: {exc}"
        results.append({"kind": check["kind"], "subject": subject(check), "holds": bool(holds), "detail": detail})
    return {"results": results, "holds": all(result["holds"] for result in results)}
