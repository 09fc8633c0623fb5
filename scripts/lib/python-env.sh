#!/usr/bin/env bash
# Create the project's virtualenv (.venv) from the lock, requirements/dev.txt (scripts/lock
# writes it): every package pinned with its hashes, then this checkout's two packages (the
# controller and the lab, editable, with no dependency of their own resolved). Sourced by
# scripts/up, scripts/test and scripts/lock. A second run with the same lock and pyproject files
# installs nothing; a changed one makes the venv anew, so it never holds a package the lock
# dropped.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$repo/.venv"
lock="$repo/requirements/dev.txt"
stamp="$venv/.specfleet-installed"
wanted="$(cat "$lock" "$repo/pyproject.toml" "$repo/lab/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    echo "specfleet: installing the locked Python packages (requirements/dev.txt) into a new .venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    # This host's pip configuration may name local indexes that do not exist; pip says so on
    # every run, about nothing that concerns the install.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$lock" \
        2> >(grep -v "^WARNING: Location" >&2)
    # The build backend (setuptools) is in the lock, so the checkout builds with it: no
    # isolated build environment fetching an unpinned one. -qq: errors only, as setuptools'
    # advice on editable installs of a flat layout is not this user's to act on.
    "$venv/bin/python" -m pip install -qq --disable-pip-version-check --no-deps --no-build-isolation \
        -e "$repo" -e "$repo/lab"
    "$venv/bin/python" "$repo/scripts/lib/lockfile.py" check "$lock"
    echo "$wanted" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
