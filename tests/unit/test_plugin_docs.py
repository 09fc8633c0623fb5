"""Every module's and action plugin's DOCUMENTATION / EXAMPLES / RETURN is valid YAML with
the keys ansible-doc needs (a parse error there hides the module from ansible-doc and lint)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PLUGINS = sorted([*(REPO / "plugins" / "modules").glob("*.py"), *(REPO / "plugins" / "action").glob("*.py")])


def doc_blocks(path: Path) -> dict[str, str]:
    blocks = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                blocks[name] = node.value.value
    return blocks


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_docs_parse(path):
    blocks = doc_blocks(path)
    # Modules carry all three; a controller-side action plugin at least its DOCUMENTATION.
    required = {"DOCUMENTATION", "EXAMPLES", "RETURN"} if path.parent.name == "modules" else {"DOCUMENTATION"}
    assert required <= set(blocks), f"{path.name} has only {sorted(blocks)}"
    documentation = yaml.safe_load(blocks["DOCUMENTATION"])
    assert {"short_description", "description"} <= set(documentation), path.name
    for name in ("EXAMPLES", "RETURN"):
        if name in blocks:
            yaml.safe_load(blocks[name])
