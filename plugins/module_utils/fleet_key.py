# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The fan-out's fleet key in a unit's authorized_keys: pure functions, standard library only.

Units copy from each other (``specfleet distribute``) with key pairs made for one run, one
per unit. A unit's public key may only ever sit in another unit's authorized_keys confined
by a forced command (``rrsync -ro <serve dir>``: read-only rsync of the verified files,
nothing else), ``restrict`` (no pty, no forwarding), ``from="<its owner's address>"`` (a key
taken from one unit works from that unit's address only) and ``expiry-time`` (a key a run
could not remove stops working on its own). There is no way to build an entry without the
forced command or without an address: a unit without rrsync gets no entry at all (fails
closed; without it the key would be a shell as the login user, who has sudo), and a unit
with no peer needs none.

Every entry names its run in its comment, ``specfleet-fanout:<run id>`` (``specfleet-fanout``
alone: the entries of releases before run ids), so an entry any earlier run left behind is
recognised and removed, never reused.

Used on units by ``fanout_unit`` (the driver's helper) and the ``fanout_key`` module, and on
the controller by the driver, which makes the key pairs.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Sequence

KEY_COMMENT = "specfleet-fanout"
# A run id: letters, digits, '.', '_', '-' (it goes into a comment and a file name).
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_COMMENT = re.compile(r"^" + re.escape(KEY_COMMENT) + r"(?::(" + RUN_ID.pattern + r"))?$")
# What starts a key rather than options (OpenSSH key type names).
_KEY_TYPE = re.compile(r"^(ssh-|ecdsa-sha2-|sk-ssh-|sk-ecdsa-sha2-)")
# Characters that would end or escape a quoted authorized_keys option value.
_UNSAFE = re.compile(r'["\\\n\r]')
# expiry-time's YYYYMMDDHHMMSS. Without a "Z": sshd reads it in the system time zone, and
# only OpenSSH 9.1 and later understand a Z (UTC) suffix; earlier ones (Ubuntu 22.04's 8.9)
# find the option invalid and ignore the whole entry (misc.c parse_absolute_time).
EXPIRY = re.compile(r"[0-9]{14}")

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


def with_fleet_entries(text: str, entries: Sequence[str]) -> str:
    """``text`` with ``entries`` as its only fleet key entries (any earlier run's removed),
    appended as the last lines. Refuses a line that is not a fleet key entry: whatever is
    added here, without_fleet_entries removes again."""
    for entry in entries:
        if "\n" in entry or "\r" in entry or fleet_run(entry) is None:
            raise ValueError(f"{entry[:80]!r} is not one fleet key entry")
    kept, _ = without_fleet_entries(text)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + "".join(entry + "\n" for entry in entries)


def rrsync_command(rrsync: str, serve_root: str) -> str:
    """The forced command: read-only rsync below ``serve_root``, nothing else."""
    command = f"{shlex.quote(rrsync)} -ro {shlex.quote(serve_root)}"
    if _UNSAFE.search(command):
        raise ValueError(f"{command!r}: a quote, backslash or line break cannot go into authorized_keys")
    return command


def expiry_time(now: float, lifetime_s: int,
                zone: Callable[[float], time.struct_time] = time.localtime) -> str:
    """expiry-time's value for a key installed at ``now`` (seconds since the epoch, this
    unit's clock) that lives ``lifetime_s`` seconds: YYYYMMDDHHMMSS in this unit's time zone
    (``zone``; tests pass time.gmtime), whole seconds rounded up.

    The controller sends a lifetime, not a time: the unit's own clock ends it, however far the
    controller's is off. sshd reads the value with mktime and tm_isdst 0; in summer time that
    is an hour later than meant, never earlier."""
    if lifetime_s <= 0:
        raise ValueError(f"a fleet key lifetime of {lifetime_s} s: it must be positive")
    return time.strftime("%Y%m%d%H%M%S", zone(math.ceil(now + lifetime_s)))


def authorized_line(public_key: str, run_id: str, peers: Sequence[str], command: str, expiry: str) -> str:
    """A fleet key's authorized_keys entry of run ``run_id``: only ``command`` (rrsync), no
    pty or forwarding (restrict), only from ``peers``, not after ``expiry`` (expiry_time).
    Refuses to build one without a forced command (a fleet key without it is a login shell),
    without an address (without from= any host that got the private key could use it) or
    without an expiry."""
    if not command.strip():
        raise ValueError("the fleet key is never authorized without a forced command (rrsync)")
    if not peers or not all(peer.strip() for peer in peers):
        raise ValueError("the fleet key is never authorized without from= (no peer address)")
    if not EXPIRY.fullmatch(expiry):
        raise ValueError(f"expiry-time {expiry!r}: YYYYMMDDHHMMSS (local time, no Z)")
    if _UNSAFE.search(command) or any(_UNSAFE.search(peer) or "," in peer or " " in peer for peer in peers):
        raise ValueError("a quote, backslash, comma, blank or line break in the forced command or a peer address")
    key = public_key.split()[:2]
    if len(key) != 2 or not _KEY_TYPE.match(key[0]):
        raise ValueError("not an OpenSSH public key")
    options = ["restrict", f'expiry-time="{expiry}"', 'from="' + ",".join(peers) + '"', f'command="{command}"']
    return ",".join(options) + f" {key[0]} {key[1]} {key_comment(run_id)}"


def peer_entries(peers: Sequence[tuple[str, str]], run_id: str, command: str, expiry: str) -> list[str]:
    """A unit's fleet key entries: one per peer (its address, its public key), each from that
    peer's address alone, in the order given. A key taken from one unit then works only from
    that unit's address, where one key shared by the fleet worked from every unit's."""
    return [authorized_line(public_key, run_id, [address], command, expiry) for address, public_key in peers]
