#!/usr/bin/env bash
# ansible-test sanity on the specfleet.fleet collection as it ships: build it, install the
# tarball into a fresh temporary directory and run the tests from there (ansible-test must
# run from .../ansible_collections/<namespace>/<name>, and the tarball holds exactly what
# galaxy.yml ships, tests/sanity/ignore-2.19.txt included). Run by scripts/test.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/scripts/lib/python-env.sh"

# ansible-test bootstraps pip into each of its virtual environments with a get-pip script
# it downloads from ci-files.testing.ansible.com, unless the script is in its cache. That
# host is out of this network's reach (PyPI is not), so the cache gets a stand-in that
# installs pip from PyPI's wheel. Written once; delete the file to write it again.
pip_version="$(python - <<'EOF'
import inspect
import re

from ansible_test._internal import python_requirements

# The pip version ansible-test bootstraps (its get_venv_packages); names the cache file.
print(re.search(r"pip='([0-9.]+)'", inspect.getsource(python_requirements.get_venv_packages)).group(1))
EOF
)"
cache_dir="$HOME/.ansible/test/cache"
get_pip="$cache_dir/get_pip_${pip_version//./_}.py"
if [[ ! -f "$get_pip" ]]; then
    echo "sanity: seeding ansible-test's pip $pip_version bootstrap from PyPI into $cache_dir" >&2
    mkdir -p "$cache_dir"
    python -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --dest "$cache_dir" "pip==$pip_version" 2> >(grep -v "^WARNING: Location" >&2)
    wheel="$cache_dir/pip-$pip_version-py3-none-any.whl"
    [[ -f "$wheel" ]] || { echo "sanity: no $wheel after the download" >&2; exit 1; }
    cat > "$get_pip.tmp" <<EOF
# Stands in for ansible-test's get-pip-$pip_version.py, which it downloads from
# ci-files.testing.ansible.com: this network cannot reach that host. It installs pip from
# PyPI's pip $pip_version wheel, saved beside this file, into the virtual environment
# ansible-test runs it with. Written by specfleet's scripts/lib/sanity.sh.
import sys

sys.path.insert(0, "$wheel")
from pip._internal.cli.main import main  # noqa: E402

# --no-setuptools and --no-wheel are get-pip's options, not pip's: pip installs neither
# unless asked. The wheel beside this file is the only index, so no network is needed.
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--no-index", "--find-links", "$cache_dir", *args]))
EOF
    mv "$get_pip.tmp" "$get_pip"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build --output-path "$work" "$repo" >/dev/null
# The install path is named in ANSIBLE_COLLECTIONS_PATH only so ansible-galaxy does not
# warn that it is outside the configured collection paths.
ANSIBLE_COLLECTIONS_PATH="$work/installed" ansible-galaxy collection install --no-deps \
    -p "$work/installed" "$work"/specfleet-fleet-*.tar.gz >/dev/null
cd "$work/installed/ansible_collections/specfleet/fleet"
ansible-test sanity --python 3.11 \
    --test validate-modules --test compile --test import --test yamllint --test ansible-doc
