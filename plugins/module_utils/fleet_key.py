# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The fan-out's fleet key in a unit's authorized_keys: pure functions, standard library only.

Units copy from each other (``specfleet distribute``) with a key pair made for one run. Its
public key may only ever sit in a unit's authorized_keys confined by a forced command
(``rrsync -ro <serve dir>``: read-only rsync of the verified files, nothing else) and
``restrict`` (no pty, no forwarding), from the fleet's addresses. There is no way to build
an entry without the forced command: a unit without rrsync gets no entry at all (fails
closed; without it the key would be a shell as the login user, who has sudo).

Every entry names its run in its comment, ``specfleet-fanout:<run id>`` (``specfleet-fanout``
alone: the entries of releases before run ids), so an entry any earlier run left behind is
recognised and removed, never reused.

Used on units by ``fanout_unit`` (the driver's helper) and the ``fanout_key`` module, and on
the controller by the driver, which makes the key pair.
"""

from __future__ import annotations

import re
import shlex

KEY_COMMENT = "specfleet-fanout"
# A run id: letters, digits, '.', '_', '-' (it goes into a comment and a file name).
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_COMMENT = re.compile(r"^" + re.escape(KEY_COMMENT) + r"(?::(" + RUN_ID.pattern + r"))?$")
# What starts a key rather than options (OpenSSH key type names).
_KEY_TYPE = re.compile(r"^(ssh-|ecdsa-sha2-|sk-ssh-|sk-ecdsa-sha2-)")
# Characters that would end or escape a quoted authorized_keys option value.
_UNSAFE = re.compile(r'["\\\n\r]')

# Where rsync packages install rrsync (Debian 12's and Ubuntu 24.04's rsync 3.2.7, and Ubuntu
# 22.04's 3.2.7 update: /usr/bin/rrsync), and where an administrator puts a copy of the script.
RRSYNC_PATHS = ("/usr/bin/rrsync", "/usr/local/bin/rrsync")
NO_RRSYNC = "rrsync not found"
RRSYNC_FIX = (
    "install an rsync package that ships /usr/bin/rrsync (Debian 12 and later, Ubuntu 24.04, Ubuntu "
    "22.04 with its rsync 3.2.7 update: `apt-get install --only-upgrade rsync`), or copy rsync's rrsync "
    "script (older packages: /usr/share/doc/rsync/scripts/rrsync, gunzip it if it is rrsync.gz) to "
    "/usr/local/bin/rrsync, mode 0755"
)


def key_comment(run_id: str) -> str:
    """The comment naming the fleet key of run ``run_id``."""
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r}: letters, digits, '.', '_' and '-' only (at most 64)")
    return f"{KEY_COMMENT}:{run_id}"


def split_entry(line: str) -> tuple[str, str, str, str] | None:
    """(options, key type, key, comment) of an authorized_keys line; None for a blank or
    comment line or one that holds no key. Options end at the first blank outside double
    quotes (``command="rrsync -ro /x"`` holds blanks)."""
    rest = line.strip()
    if not rest or rest.startswith("#"):
        return None
    options = ""
    if not _KEY_TYPE.match(rest):
        quoted, index = False, 0
        while index < len(rest):
            char = rest[index]
            if char == "\\" and quoted:
                index += 2
                continue
            if char == '"':
                quoted = not quoted
            elif char in " \t" and not quoted:
                break
            index += 1
        options, rest = rest[:index], rest[index:].lstrip()
    parts = rest.split(None, 2)
    if len(parts) < 2:
        return None
    return options, parts[0], parts[1], parts[2] if len(parts) > 2 else ""


def fleet_run(line: str) -> str | None:
    """The run an authorized_keys line is the fleet key of ("" for an entry from before run
    ids), or None when it is not a fleet key entry."""
    entry = split_entry(line)
    if entry is None or not entry[3]:
        return None
    match = _COMMENT.match(entry[3].split()[0])
    if match is None:
        return None
    return match.group(1) or ""


def without_fleet_entries(text: str) -> tuple[str, list[str]]:
    """``text`` (an authorized_keys file) without any fleet key entry, of any run, every other
    line kept exactly as it was; and the entries removed (without their line ends)."""
    kept, removed = [], []
    for line in text.splitlines(keepends=True):
        if fleet_run(line) is None:
            kept.append(line)
        else:
            removed.append(line.rstrip("\r\n"))
    return "".join(kept), removed


def with_fleet_entry(text: str, entry: str) -> str:
    """``text`` with ``entry`` as its only fleet key entry (any earlier run's removed),
    appended as the last line."""
    kept, _ = without_fleet_entries(text)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + entry + "\n"


def rrsync_command(rrsync: str, serve_root: str) -> str:
    """The forced command: read-only rsync below ``serve_root``, nothing else."""
    command = f"{shlex.quote(rrsync)} -ro {shlex.quote(serve_root)}"
    if _UNSAFE.search(command):
        raise ValueError(f"{command!r}: a quote, backslash or line break cannot go into authorized_keys")
    return command


def authorized_line(public_key: str, run_id: str, peers: list[str], command: str) -> str:
    """The fleet key's authorized_keys entry of run ``run_id``: only ``command`` (rrsync), no
    pty or forwarding (restrict), only from ``peers``. Refuses to build one without a forced
    command: a fleet key without it is a login shell."""
    if not command.strip():
        raise ValueError("the fleet key is never authorized without a forced command (rrsync)")
    if _UNSAFE.search(command) or any(_UNSAFE.search(peer) or "," in peer or " " in peer for peer in peers):
        raise ValueError("a quote, backslash, comma, blank or line break in the forced command or a peer address")
    key = public_key.split()[:2]
    if len(key) != 2 or not _KEY_TYPE.match(key[0]):
        raise ValueError("not an OpenSSH public key")
    options = ["restrict"]
    if peers:
        options.append('from="' + ",".join(peers) + '"')
    options.append(f'command="{command}"')
    return ",".join(options) + f" {key[0]} {key[1]} {key_comment(run_id)}"
