"""The unit layout: one definition of where specfleet keeps things on a unit and what it names
them, read by the modules, the controller package and (through the lookup) the roles."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleLookupError
from ansible_collections.specfleet.fleet.plugins.lookup.unit_layout import LookupModule
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT, STATE_DIR

from tests.conftest import REPO


def test_the_lookup_returns_the_layout_and_names_what_it_has():
    lookup = LookupModule()
    assert lookup.run(["state_dir", "serving_ulimits"]) == [STATE_DIR, LAYOUT["serving_ulimits"]]
    with pytest.raises(AnsibleLookupError, match="unit_layout has no 'stat_dir'; it has .*state_dir"):
        lookup.run(["stat_dir"])


def test_paths_are_under_the_state_directory():
    paths = {key: value for key, value in LAYOUT.items() if key.endswith(("_dir", "_file")) and key != "state_dir"}
    assert paths and all(value.startswith(STATE_DIR + "/") for value in paths.values())


# The layout's values, as a role default, a playbook variable or controller code would spell them.
LITERALS = re.compile(r"/var/lib/specfleet(?![-\w])|specfleet-vllm|org\.specfleet\.config-hash|67108864:67108864")


@pytest.mark.parametrize("pattern", ["roles/*/defaults/main.yml", "roles/*/tasks/*.yml", "playbooks/**/*.yml",
                                     "specfleet/*.py", "plugins/action/*.py"])
def test_nothing_else_spells_a_layout_value(pattern):
    # Comments may say what a value is; settings and code take it from the layout.
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in REPO.glob(pattern)
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if LITERALS.search(line.split("#", 1)[0])]
    assert found == []
