"""The project's lock files (requirements/*.txt, written by scripts/lock with pip-compile).

Standard library only: scripts/lib/python-env.sh runs it with the venv's fresh interpreter to
check an install, and scripts/lock with the venv's to write the collection's requirements.txt.

    python scripts/lib/lockfile.py check requirements/dev.txt
        exit 1, naming each package, when `pip freeze --all` of the running interpreter is not
        exactly the lock, package for package (the checkout's own packages aside)
    python scripts/lib/lockfile.py collection-requirements requirements/controller.txt
        print the collection's requirements.txt: the lock's pins, without hashes
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# The checkout's own packages: installed editable from the working tree, not from the lock.
CHECKOUT_PACKAGES = frozenset({"specfleet", "specfleet-lab"})
# What installs the packages rather than what the plugins import: locked, not the collection's.
INSTALLER_PACKAGES = frozenset({"pip", "setuptools"})
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def canonical_name(name: str) -> str:
    """PEP 503's normalised name: `PyYAML`, `pyyaml` and `py_yaml` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, str]:
    """Each pinned package of a pip-compile output (hash and comment lines skipped): name -> version."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonical_name(match.group(1))] = match.group(2)
    return pins


def mismatches(locked: dict[str, str], installed: dict[str, str]) -> list[str]:
    """What differs between the lock and an install, one line per package; empty when they agree."""
    found = []
    for name in sorted(locked.keys() | installed.keys()):
        if name in CHECKOUT_PACKAGES:
            continue
        want, have = locked.get(name), installed.get(name)
        if want is None:
            found.append(f"{name} {have} is installed but not in the lock")
        elif have is None:
            found.append(f"{name} {want} is locked but not installed")
        elif want != have:
            found.append(f"{name} is {have}, the lock says {want}")
    return found


def installed_packages() -> dict[str, str]:
    """What `pip freeze --all` says the running interpreter has: name -> version (pip and the
    build backend included; the checkout's own packages are listed by path and not read)."""
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True)
    return parse_lock(frozen.stdout)


def collection_requirements(locked: dict[str, str], source: str) -> str:
    """The collection's requirements.txt: the controller package and the lock's pins."""
    lines = [
        "# Python requirements of the specfleet.fleet collection on the controller, as locked in",
        f"# {source} (written from it by scripts/lock; edit neither by hand). The action, filter",
        "# and callback plugins wrap the `specfleet` package, this repository's own (install it",
        "# from the checkout: README, \"Your own fleet\"); the modules need only python3 on the units.",
        "specfleet",
    ]
    lines += [f"{name}=={version}" for name, version in sorted(locked.items()) if name not in INSTALLER_PACKAGES]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("check", "collection-requirements"):
        print(__doc__, file=sys.stderr)
        return 2
    command, path = argv
    try:
        locked = parse_lock(Path(path).read_text())
    except OSError as err:
        print(f"lockfile: cannot read {path}: {err.strerror}", file=sys.stderr)
        return 2
    if not locked:
        print(f"lockfile: {path} pins no package", file=sys.stderr)
        return 2
    if command == "collection-requirements":
        sys.stdout.write(collection_requirements(locked, path))
        return 0
    problems = mismatches(locked, installed_packages())
    for problem in problems:
        print(f"lockfile: {sys.prefix}: {problem} ({path})", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
