"""`specfleet hostkeys`: collect the fleet's SSH host keys into known_hosts, on purpose.

Host-key checking stays on (ansible.cfg `host_key_checking = True`), so 60 freshly flashed
units must be known before the first run. This command reads every unit's keys with
`ssh-keyscan`, prints their fingerprints (to compare with the units' own, e.g. on their
consoles), adds the units it has never seen to the known_hosts file ssh uses for them, and
refuses a unit whose key changed since: that is a reflashed unit or somebody in the middle,
and only a person can tell which (`ssh-keygen -R` then removes the old key).

Where a unit is reached, and which known_hosts file holds it, is what `ssh -G` says for the
unit's connection settings (ansible_host/port/user and ansible_ssh_common_args): ssh's own
config (aliases, HostKeyAlias, UserKnownHostsFile) applies as it does for Ansible.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

KEY_TYPES = "ed25519,ecdsa,rsa"
SCAN_TIMEOUT = 5
# What the command found for a unit.
KNOWN, ADDED, CHANGED, UNREACHABLE = "known", "added", "CHANGED", "unreachable"


# ---- pure parts -------------------------------------------------------------------------
def parse_ssh_config(text: str) -> dict[str, str]:
    """`ssh -G` output (lowercase keyword, value) as a dict; repeated keywords keep the first."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        keyword, _, value = line.strip().partition(" ")
        if keyword:
            config.setdefault(keyword.lower(), value.strip())
    return config


def known_hosts_name(config: dict[str, str]) -> str:
    """The name ssh looks the unit up by in known_hosts: HostKeyAlias, else the host name,
    in brackets with the port when it is not 22."""
    alias = config.get("hostkeyalias", "none")
    name = alias if alias and alias != "none" else config["hostname"]
    port = config.get("port", "22")
    return name if port == "22" else f"[{name}]:{port}"


def known_hosts_file(config: dict[str, str]) -> Path:
    """The file ssh adds keys to: the first UserKnownHostsFile (~ expanded)."""
    first = config.get("userknownhostsfile", "~/.ssh/known_hosts").split()[0]
    return Path(os.path.expanduser(first))


def parse_keys(text: str) -> list[tuple[str, str]]:
    """(key type, base64 key) of each known_hosts-format line (ssh-keyscan's, ssh-keygen -F's);
    comments, markers other than @revoked and malformed lines are skipped. A @revoked key
    counts as changed: ssh refuses it."""
    keys = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "@revoked":
            keys.append(("@revoked", fields[3] if len(fields) > 3 else ""))
            continue
        if fields[0].startswith("@") or len(fields) < 3:
            continue
        keys.append((fields[1], fields[2]))
    return keys


def fingerprint(key_b64: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key (what `ssh-keygen -lf` prints)."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def compare(known: list[tuple[str, str]], scanned: list[tuple[str, str]]) -> str:
    """KNOWN when a scanned key is already trusted and no known key of a scanned type differs;
    CHANGED when one does (or a scanned key is revoked); ADDED when nothing is known yet
    (the caller adds the scanned keys); UNREACHABLE when nothing was scanned."""
    if not scanned:
        return UNREACHABLE
    revoked = {key for kind, key in known if kind == "@revoked"}
    if any(key in revoked for _kind, key in scanned):
        return CHANGED
    trusted = [(kind, key) for kind, key in known if kind != "@revoked"]
    if not trusted:
        return ADDED
    for kind, key in scanned:
        same_type = {k for t, k in trusted if t == kind}
        if same_type and key not in same_type:
            return CHANGED
    return KNOWN if any(entry in trusted for entry in scanned) else CHANGED


def hashed_name(name: str, salt: bytes) -> str:
    """A known_hosts name hashed as ssh's HashKnownHosts does (|1|salt|HMAC-SHA1)."""
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()}"


def known_hosts_lines(name: str, scanned: list[tuple[str, str]], hashed: bool, salt: bytes = b"") -> list[str]:
    """The lines that make the scanned keys known under `name`."""
    shown = hashed_name(name, salt or os.urandom(20)) if hashed else name
    return [f"{shown} {kind} {key}" for kind, key in scanned]


# ---- talking to ssh ---------------------------------------------------------------------
@dataclass
class Finding:
    unit: str
    address: str
    known_hosts: str
    status: str
    fingerprints: list[str] = field(default_factory=list)
    known_fingerprints: list[str] = field(default_factory=list)
    detail: str = ""


def examine(node) -> tuple[Finding, list[tuple[str, str]], dict[str, str]]:
    """Resolve, scan and look up one unit; nothing is written here."""
    resolved = subprocess.run(["ssh", "-G", *node.connection_args(), "--", node.host], capture_output=True, text=True,
                              timeout=30, check=False)
    if resolved.returncode != 0:
        return Finding(node.name, node.host, "", UNREACHABLE, detail=resolved.stderr.strip()), [], {}
    config = parse_ssh_config(resolved.stdout)
    name, file = known_hosts_name(config), known_hosts_file(config)
    scan = subprocess.run(["ssh-keyscan", "-T", str(SCAN_TIMEOUT), "-p", config.get("port", "22"),
                           "-t", KEY_TYPES, "--", config["hostname"]],
                          capture_output=True, text=True, timeout=SCAN_TIMEOUT * 4 + 10, check=False)
    scanned = parse_keys(scan.stdout)
    known: list[tuple[str, str]] = []
    if file.exists():
        lookup = subprocess.run(["ssh-keygen", "-F", name, "-f", str(file)], capture_output=True, text=True,
                                timeout=30, check=False)
        known = parse_keys(lookup.stdout)
    status = compare(known, scanned)
    finding = Finding(
        node.name, name, str(file), status,
        fingerprints=[f"{kind} {fingerprint(key)}" for kind, key in scanned],
        known_fingerprints=[f"{kind} {fingerprint(key)}" for kind, key in known if key],
        detail="no answer from ssh-keyscan" if status == UNREACHABLE else "",
    )
    return finding, scanned, config


def collect(nodes: list, workers: int = 16) -> list[Finding]:
    """Examine every unit in parallel, then append the new units' keys (one writer)."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
        results = list(pool.map(examine, nodes))
    for finding, scanned, config in results:
        if finding.status != ADDED:
            continue
        path = Path(finding.known_hosts)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        hashed = config.get("hashknownhosts", "no") == "yes"
        with path.open("a") as handle:
            os.chmod(path, 0o600)
            handle.write("\n".join(known_hosts_lines(finding.address, scanned, hashed)) + "\n")
    return [finding for finding, _scanned, _config in results]


def _print_table(findings: list[Finding]) -> None:
    for finding in findings:
        print(f"{finding.unit:<20} {finding.status:<11} {finding.address}  ({finding.known_hosts or '-'})")
        for line in finding.fingerprints:
            print(f"{'':<20} {'':<11} {line}")
        if finding.status == CHANGED:
            print(f"{'':<20} {'':<11} known before: {', '.join(finding.known_fingerprints) or 'revoked'}")
            print(f"{'':<20} {'':<11} refused: check the unit's key on its console; if it was reflashed, "
                  f"`ssh-keygen -R '{finding.address}' -f {finding.known_hosts}` and run this again")
        elif finding.detail:
            print(f"{'':<20} {'':<11} {finding.detail}")


def cmd_hostkeys(args: argparse.Namespace) -> int:
    from specfleet.fanout_run import nodes_from_inventory

    try:
        nodes = nodes_from_inventory(args.inventory, args.limit.split(",") if args.limit else None)
    except (ValueError, OSError) as exc:
        print(f"specfleet hostkeys: {args.inventory}: {exc}", file=sys.stderr)
        return 2
    findings = collect(nodes)
    if args.format == "json":
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        _print_table(findings)
    refused = [f.unit for f in findings if f.status in (CHANGED, UNREACHABLE)]
    if refused:
        print(f"specfleet hostkeys: not trusted: {', '.join(refused)}", file=sys.stderr)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "hostkeys",
        help="collect the units' SSH host keys into known_hosts (refuses a key that changed)",
        description="Scan every unit's SSH host keys (ssh-keyscan), print their fingerprints, add the "
        "units never seen before to the known_hosts file ssh uses for them, and refuse a unit whose key "
        "changed since. Exit 0 when every unit is trusted, 1 when some key changed or a unit did not "
        "answer (named), 2 for a bad inventory.",
    )
    parser.add_argument("-i", "--inventory", required=True, help="Ansible inventory of the units")
    parser.add_argument("--limit", help="comma-separated host names (default: every host)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(func=cmd_hostkeys)
