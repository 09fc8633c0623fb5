"""The README's real-fleet quick start ("Your own fleet"), run as written by an unprivileged
user against stock lab units. Used by test_stock_lab.py, which has the stock lab up.

What the test changes, and only that (the lab is not a real fleet):
- the clone is a copy of this checkout's files, owned by the user;
- the user's SSH key is the lab's (the units already accept it, as ssh-copy-id would have made
  them);
- the inventory's `hosts` are the lab units (by address), and two files the README does not
  show carry the lab's own settings: group_vars/all/lab.yml (its LAN apt mirror and registry,
  its stand-in tiktoken sums, emulator settings) and host_vars/<unit>.yml (where the unit's
  Jetson identity files are, its class's model);
- huggingface_hub reaches a loopback stand-in Hub by HF_ENDPOINT (its own variable), serving
  the lab's stand-in models, and `specfleet store tiktoken` gets `--url-prefix` to a loopback
  server of the lab's stand-in encodings (the command's option for a site mirror).
Everything else, every command and file, is the README's text.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from labtools import REPO

USER = "specfleet-quickstart"
SECTION = "## Your own fleet"
# Shared across runs (a CI machine starts without it): the user's pip downloads.
PIP_CACHE = Path("/var/cache/specfleet-tests/quickstart-pip")
# Not part of a clone: local state and build output at the top, the lab's build tree and
# inventory, caches anywhere.
NOT_IN_A_CLONE_PATHS = {".git", ".venv", ".cache", ".ansible", ".pytest_cache", ".ruff_cache", "runs", "dist", "files",
                        "lab/build", "inventory/lab"}
NOT_IN_A_CLONE = {"__pycache__", ".pytest_cache", ".ruff_cache"}
# Connection settings the README's inventory makes itself (user, known_hosts, key): not taken
# from the lab's inventory. The stores: the README's specfleet_files_dir places them. The API
# key's vault id: the lab names its vault password "lab", the README's event has the default one.
LAB_ONLY = {"ansible_host", "ansible_user", "ansible_ssh_private_key_file", "ansible_ssh_common_args",
            "ansible_python_interpreter", "ansible_become_password",
            "specfleet_hf_cache_store", "specfleet_tiktoken_source_dir", "specfleet_api_key_vault_id"}


@dataclass
class Block:
    language: str
    text: str

    @property
    def file(self) -> str | None:
        """`~/event/ansible.cfg` for a block whose first line names the file it is."""
        first = self.text.splitlines()[0]
        match = re.fullmatch(r"# (~/\S+)", first)
        return match.group(1) if match and self.language in ("ini", "yaml") else None


def blocks(readme: str) -> list[Block]:
    start = readme.index(SECTION + "\n")
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start : end if end != -1 else len(readme)]
    return [Block(lang, text) for lang, text in re.findall(r"^```(\w+)\n(.*?)^```$", section, re.S | re.M)]


# ---------------------------------------------------------------- the user


def fresh_user() -> pwd.struct_passwd:
    """A new login with an empty home: nothing of an earlier run stays."""
    remove_user()
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", USER], check=True)
    return pwd.getpwnam(USER)


def remove_user() -> None:
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return
    end_processes_of(USER)
    subprocess.run(["userdel", "--remove", USER], check=False, capture_output=True)


def end_processes_of(name: str) -> None:
    """The user's processes (its ssh ControlPersist masters), by PID: the user is this test's."""
    uid = pwd.getpwnam(name).pw_uid
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid == uid:
                os.kill(int(proc.name), signal.SIGTERM)
        except (OSError, ValueError):
            continue


def give(path: Path, user: pwd.struct_passwd) -> None:
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(path)], check=True)


def copy_checkout(target: Path, user: pwd.struct_passwd) -> None:
    """The checkout's files as a clone has them (working-tree state, not only what is committed)."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        relative = Path(directory).relative_to(REPO)
        return {name for name in names if name in NOT_IN_A_CLONE or name.endswith(".egg-info")
                or (relative / name).as_posix() in NOT_IN_A_CLONE_PATHS}

    shutil.copytree(REPO, target, symlinks=True, ignore=ignore)
    give(target, user)


def install_ssh_key(lab_key: Path, user: pwd.struct_passwd) -> None:
    ssh_dir = Path(user.pw_dir) / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.copyfile(lab_key, ssh_dir / "id_ed25519")
    shutil.copyfile(lab_key.with_name(lab_key.name + ".pub"), ssh_dir / "id_ed25519.pub")
    (ssh_dir / "id_ed25519").chmod(0o600)
    give(ssh_dir, user)


def environment(user: pwd.struct_passwd, **extra: str) -> dict[str, str]:
    home = user.pw_dir
    env = {
        "HOME": home, "USER": user.pw_name, "LOGNAME": user.pw_name, "SHELL": "/bin/bash", "LANG": "C.UTF-8",
        # The venv first, as `. ~/.venvs/specfleet/bin/activate` in the user's shell leaves it.
        "PATH": f"{home}/.venvs/specfleet/bin:/usr/local/bin:/usr/bin:/bin",
        "PIP_CACHE_DIR": str(PIP_CACHE), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        "COLUMNS": "250",  # `specfleet status`'s table: one line per unit
    }
    # This machine's way to PyPI (certificates, timeouts, proxies), as the user's shell would have it.
    env.update({k: v for k, v in os.environ.items()
                if k.startswith("PIP_") and k not in ("PIP_CACHE_DIR", "PIP_FIND_LINKS")
                or k.lower() in ("http_proxy", "https_proxy")})
    env.update(extra)
    return env


def run_as(user: pwd.struct_passwd, script: str, cwd: Path, env: dict[str, str], stdin: str = "",
           timeout: float = 3600) -> subprocess.CompletedProcess:
    """`bash -euo pipefail` as the user, in `cwd`, with only `env`."""
    argv = ["runuser", "-u", user.pw_name, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
            "bash", "-euo", "pipefail", "-c", script]
    return subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


# ---------------------------------------------------------------- the lab's part


def lab_layer(inventory_dir: Path, unit: str) -> tuple[dict, dict]:
    """(group_vars/all/lab.yml, host_vars/<unit>.yml) from the lab's own inventory."""
    all_vars = yaml.safe_load((inventory_dir / "group_vars/all/main.yml").read_text())
    hosts = yaml.safe_load((inventory_dir / "hosts.yml").read_text())["all"]["children"]
    group, host = next((name, group["hosts"][unit]) for name, group in hosts.items() if unit in group["hosts"])
    class_vars = yaml.safe_load((inventory_dir / "group_vars" / f"{group}.yml").read_text()) or {}
    drop = lambda data: {k: v for k, v in data.items() if k not in LAB_ONLY}  # noqa: E731
    return drop(all_vars), {**drop(class_vars), **drop(host)}


def event_inventory(readme_inventory: str, units: dict[str, str]) -> str:
    """The README's inventory with its example hosts replaced by the lab units (name -> address)."""
    data = yaml.safe_load(readme_inventory)
    data["all"]["hosts"] = {name: {"ansible_host": address} for name, address in units.items()}
    return yaml.safe_dump(data, sort_keys=False)


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving_directory(directory: Path) -> Iterator[str]:
    """http://127.0.0.1:PORT/ serving `directory` (the lab's stand-in tiktoken files)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietFiles, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
