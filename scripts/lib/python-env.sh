#!/usr/bin/env bash
# Create or refresh the project's virtualenv (.venv) from pyproject.toml and lab/pyproject.toml.
# Sourced by scripts/up and scripts/test; a second run with an unchanged
# pyproject.toml installs nothing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$repo/.venv"
stamp="$venv/.specfleet-installed"
wanted="$(cat "$repo/pyproject.toml" "$repo/lab/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
if [[ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    echo "specfleet: installing Python dependencies into .venv" >&2
    # The controller package with its development tools, and the lab (its own package, not
    # part of the product) in one resolve, so the lab's `specfleet` is this checkout.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$repo[dev]" -e "$repo/lab" \
        2> >(grep -v "^WARNING: Location" >&2)
    echo "$wanted" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"
