# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Unit-side helper of the fan-out driver (``specfleet distribute``). Standard library only.

The driver copies this file and ``store_manifest.py`` into ``<root>/.specfleet/fanout/``
on each unit and runs ``python3 fanout_unit.py COMMAND`` with a JSON request on stdin; it
answers one JSON object on stdout.

Where things are (``StoreLayout`` of ``store_manifest``):
- copies arrive in the staging dir ``<root>/.specfleet/incoming/<name>/<id>``;
- every file that verified against the manifest is hard-linked into the *serve* dir
  ``<root>/.specfleet/serve/<name>/<id>``, the only place other units may read from
  (their key is confined read-only to ``<root>/.specfleet/serve`` by rrsync), so a unit
  passes on only what it verified, and keeps serving it after the switch-in (hard links
  survive the staging dir's rename into ``versions/``);
- ``promote`` verifies the whole staging copy and switches it in atomically.

The fleet key (``fleet_key``): ``prepare`` first removes every fleet key an earlier run left
(authorized_keys entries of any run, private key, known_hosts), then installs this run's: the
unit's own private key, and one authorized_keys entry per peer (that peer's public key, from
that peer's address only, expiring when the run's lifetime ends on this unit's clock), but only
where rrsync confines them; without rrsync it installs nothing and says so (the driver serves
that unit from the controller), and a unit without peers needs nothing. ``cleanup`` removes
them again.

Commands: prepare, pull, verify, promote, cleanup.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:  # on the controller (tests) and in a module the helpers live in the collection
    from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key
    from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file
    from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
        StoreLayout,
        promote,
        sha256_file,
        verify_tree,
    )
except ImportError:  # on a unit it is shipped next to this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fleet_key  # type: ignore[no-redef]
    from atomic_files import write_file  # type: ignore[no-redef]
    from store_manifest import StoreLayout, promote, sha256_file, verify_tree  # type: ignore[no-redef]

# rsync exit codes that mean "could not talk to the other end" rather than "bad data".
TRANSPORT_CODES = {5, 10, 12, 30, 35, 255}


def serve_root(root: str) -> str:
    return os.path.join(root, ".specfleet", "serve")


def helper_dir(root: str) -> str:
    """Where the driver ships this file (and store_manifest.py, manifest.json)."""
    return os.path.join(root, ".specfleet", "fanout")


def serve_dir(root: str, name: str, ident: str) -> str:
    return os.path.join(serve_root(root), name, ident)


def _link(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    os.link(src, dst)


def _file_ok(path: str, entry: dict) -> bool:
    return (os.path.isfile(path) and not os.path.islink(path)
            and os.path.getsize(path) == entry["size"] and sha256_file(path) == entry["sha256"])


def verify_files(root: str, subdir: str, manifest: dict, files: list[str]) -> dict:
    """Check ``files`` in staging; link the good ones into the serve dir, delete the bad
    ones (so the next copy fetches them whole)."""
    layout = StoreLayout(root, subdir, manifest["name"])
    staging = layout.staging_dir(manifest["id"])
    serve = serve_dir(root, manifest["name"], manifest["id"])
    good, bad = [], []
    for relative in files:
        entry = manifest["files"].get(relative)
        path = os.path.join(staging, relative)
        if entry is not None and _file_ok(path, entry):
            _link(path, os.path.join(serve, relative))
            good.append(relative)
        else:
            bad.append(relative)
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
    return {"ok": good, "bad": bad}


def prepare(root: str, subdir: str, manifest: dict) -> dict:
    """Make the staging and serve dirs; report which files this unit already holds
    verified (live store, or an earlier interrupted copy), linking them into both."""
    layout = StoreLayout(root, subdir, manifest["name"])
    ident = manifest["id"]
    staging = layout.staging_dir(ident)
    serve = serve_dir(root, manifest["name"], ident)
    current = layout.current_id()
    live_dir = layout.version_dir(current) if current else None
    if current == ident and not verify_tree(live_dir, manifest, full=False):
        # Already live: serve it as it is (sizes checked here; it was verified in full
        # when it was switched in).
        for relative in manifest["files"]:
            _link(os.path.join(live_dir, relative), os.path.join(serve, relative))
        return {"up_to_date": True, "have": sorted(manifest["files"]), "staging_dir": staging,
                "serve_dir": serve, "link_dest": live_dir}
    os.makedirs(staging, exist_ok=True)
    os.makedirs(serve, exist_ok=True)
    have = []
    for relative, entry in manifest["files"].items():
        path = os.path.join(staging, relative)
        if not _file_ok(path, entry) and live_dir:
            # What rsync --link-dest would do for an unchanged file, done up front so the
            # piece counts as held and is not scheduled at all.
            old = os.path.join(live_dir, relative)
            if _file_ok(old, entry):
                _link(old, path)
        if _file_ok(path, entry):
            _link(path, os.path.join(serve, relative))
            have.append(relative)
        elif os.path.isfile(path) and os.path.getsize(path) >= entry["size"]:
            # Whole size but wrong bytes: rsync's quick check could keep it; fetch it anew.
            # (A shorter file is a partial copy rsync --partial resumes from.)
            os.unlink(path)
    return {"up_to_date": False, "have": sorted(have), "staging_dir": staging, "serve_dir": serve,
            "link_dest": live_dir if live_dir and os.path.isdir(live_dir) else None}


def pull(root: str, subdir: str, manifest: dict, request: dict) -> dict:
    """rsync ``files`` from a peer's serve dir into staging, then verify them."""
    layout = StoreLayout(root, subdir, manifest["name"])
    ident = manifest["id"]
    staging = layout.staging_dir(ident)
    os.makedirs(staging, exist_ok=True)
    argv = ["rsync", "-a", "--partial", f"--timeout={int(request.get('timeout', 30))}",
            "--files-from=-", "-e", " ".join(peer_ssh(request))]
    if request.get("link_dest"):
        argv.append(f"--link-dest={request['link_dest']}")
    # Relative to the peer's rrsync root (<root>/.specfleet/serve).
    argv += [f"{request['peer']}:{manifest['name']}/{ident}/", staging + "/"]
    # stderr to a file, not a pipe: a persisting ssh master inherits it and would keep a
    # pipe open (and this call waiting) until it exits.
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as errors:
        proc = subprocess.run(argv, input="".join(f + "\n" for f in request["files"]),
                              stdout=subprocess.DEVNULL, stderr=errors, text=True, check=False)
        errors.seek(0)
        stderr = errors.read()[-2000:]
    result = {"rsync_rc": proc.returncode, "stderr": stderr, "rsync_seconds": round(time.monotonic() - started, 3),
              "transport": proc.returncode in TRANSPORT_CODES}
    if proc.returncode != 0:
        result.update(ok=[], bad=list(request["files"]))
        return result
    result.update(verify_files(root, subdir, manifest, request["files"]))
    return result


def finish(root: str, subdir: str, manifest: dict) -> dict:
    """Symlinks from the manifest, then verify everything and switch in (promote)."""
    layout = StoreLayout(root, subdir, manifest["name"])
    staging = layout.staging_dir(manifest["id"])
    if layout.current_id() == manifest["id"] and not verify_tree(
            layout.version_dir(manifest["id"]), manifest, full=False):
        return {"problems": [], "changed": False, "live": layout.live}
    for relative, target in manifest["symlinks"].items():
        path = os.path.join(staging, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.islink(path) and os.readlink(path) == target:
            continue
        if os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        os.symlink(target, path)
    problems = promote(layout, manifest)
    serve = serve_dir(root, manifest["name"], manifest["id"])
    for problem in problems:
        # promote removed the bad file from staging; stop serving it too.
        bad = os.path.join(serve, problem.split(":", 1)[0])
        if os.path.isfile(bad) and not os.path.islink(bad):
            os.unlink(bad)
    return {"problems": problems, "changed": not problems, "live": layout.live}


def ssh_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".ssh")


def key_paths(directory: str | None = None) -> dict:
    """The fleet key's files in ``directory`` (default: the login user's ~/.ssh)."""
    base = directory or ssh_dir()
    return {"key": os.path.join(base, "specfleet_fanout"),
            "known_hosts": os.path.join(base, "specfleet_fanout_known_hosts"),
            "authorized_keys": os.path.join(base, "authorized_keys")}


def _write(path: str, text: str, mode: int) -> None:
    write_file(path, text, mode)


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read()


def find_rrsync() -> str | None:
    found = shutil.which("rrsync")
    if found and os.path.isabs(found):
        return found
    return next((path for path in fleet_key.RRSYNC_PATHS if os.access(path, os.X_OK)), None)


def remove_keys(directory: str | None = None, dry_run: bool = False) -> dict:
    """Remove every fleet key entry (of any run) from authorized_keys, the fleet private key
    and its known_hosts. Nothing else in authorized_keys changes (its mode neither); a file
    that held nothing but fleet entries is removed. ``dry_run``: only say what would go."""
    paths = key_paths(directory)
    authorized = os.path.realpath(paths["authorized_keys"])
    text = _read(authorized)
    kept, entries = fleet_key.without_fleet_entries(text or "")
    files = [paths[name] for name in ("key", "known_hosts") if os.path.lexists(paths[name])]
    # A run leaves one entry per peer: each run is named once, in the order found.
    runs = list(dict.fromkeys(fleet_key.fleet_run(entry) for entry in entries))
    result = {"changed": bool(entries or files), "removed_entries": entries, "removed_runs": runs,
              "removed_files": files}
    if dry_run:
        return result
    if entries:
        if kept.strip():
            _write(authorized, kept, os.stat(authorized).st_mode & 0o777)
        else:
            os.unlink(authorized)
    for path in files:
        os.unlink(path)
    return result


def install_keys(root: str, request: dict, now: float | None = None) -> dict:
    """Remove what earlier runs left, then install this run's fleet keys: one authorized_keys
    entry per peer in ``request["authorized"]`` (its public key, confined to ``rrsync -ro
    <serve dir>``, from its ``address`` only, until ``key_lifetime_s`` from ``now`` on this
    unit's clock), this unit's private key and the peers' host keys. Without rrsync nothing
    is installed (``fleet_key: refused``): a key is never authorized without its forced
    command. Without a peer nothing is installed either (``fleet_key: none``): a lone unit
    pulls from nobody and nobody pulls from it, and an entry without from= is never made."""
    swept = remove_keys()
    stale = swept["removed_runs"]
    peers = [(peer["address"], peer["public_key"]) for peer in request.get("authorized", [])]
    if not peers:
        return {"fleet_key": "none", "reason": "no peer", "stale_runs": stale}
    rrsync = find_rrsync()
    if rrsync is None:
        return {"fleet_key": "refused", "reason": fleet_key.NO_RRSYNC, "stale_runs": stale}
    # Built before anything is written: a bad address or key fails the prepare with nothing of
    # this run on the unit.
    expiry = fleet_key.expiry_time(time.time() if now is None else now, int(request["key_lifetime_s"]))
    lines = fleet_key.peer_entries(peers, request["run_id"], fleet_key.rrsync_command(rrsync, serve_root(root)),
                                   expiry)
    paths = key_paths()
    os.makedirs(ssh_dir(), mode=0o700, exist_ok=True)
    os.makedirs(serve_root(root), exist_ok=True)
    authorized = os.path.realpath(paths["authorized_keys"])
    mode = os.stat(authorized).st_mode & 0o777 if os.path.exists(authorized) else 0o600
    _write(authorized, fleet_key.with_fleet_entries(_read(authorized) or "", lines), mode)
    _write(paths["key"], request["private_key"], 0o600)
    _write(paths["known_hosts"], request["known_hosts"], 0o644)
    return {"fleet_key": "installed", "authorized": lines, "expiry_time": expiry, "stale_runs": stale}


def peer_ssh(request: dict) -> list[str]:
    """How this unit reaches a peer: the fleet key, the peers' recorded host keys only."""
    paths = key_paths()
    return ["ssh", "-i", paths["key"], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={paths['known_hosts']}", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "-o", "Ciphers=aes128-gcm@openssh.com,chacha20-poly1305@openssh.com",
            # One connection per peer for the whole run (each copy is a new session on it):
            # saves a key exchange per piece. The master exits 15 s after its last use.
            "-o", "ControlMaster=auto", "-o", f"ControlPath={os.path.join(ssh_dir(), 'sf-fanout-%C')}",
            "-o", "ControlPersist=15",
            "-p", str(request.get("peer_port", 22)), "-l", str(request.get("peer_user", "root"))]


def cleanup(root: str, name: str) -> dict:
    """Drop the fleet key (every run's), the serve dir of this store (hard links only: the
    live store is untouched) and the shipped helper."""
    keys = remove_keys()
    path = os.path.join(serve_root(root), name)
    shutil.rmtree(path, ignore_errors=True)
    result = {"removed": path, "removed_runs": keys["removed_runs"]}
    here = os.path.dirname(os.path.abspath(__file__))
    if here == os.path.abspath(helper_dir(root)):  # only the copy the driver shipped
        shutil.rmtree(here, ignore_errors=True)
    return result


def main() -> None:
    command = sys.argv[1]
    request = json.load(sys.stdin)
    root, subdir = request["root"], request.get("subdir", "")
    here = os.path.dirname(os.path.abspath(__file__))
    manifest = request.get("manifest")
    if manifest is None and "manifest_file" in request:
        with open(os.path.join(here, request["manifest_file"])) as handle:
            manifest = json.load(handle)
    if command == "prepare":
        # Before anything else: what earlier runs left goes; this run's fleet key (not in
        # push mode) arrives in the same round trip.
        if request.get("keys"):
            keys = install_keys(root, request["keys"])
        else:
            keys = {"fleet_key": "none", "stale_runs": remove_keys()["removed_runs"]}
        result = {**prepare(root, subdir, manifest), **keys}
    elif command == "pull":
        result = pull(root, subdir, manifest, request)
    elif command == "verify":
        result = verify_files(root, subdir, manifest, request["files"])
    elif command == "promote":
        result = finish(root, subdir, manifest)
    elif command == "cleanup":
        result = cleanup(root, request["name"])
    else:
        raise SystemExit(f"unknown command {command}")
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
