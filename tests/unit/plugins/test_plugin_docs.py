"""Every plugin has documentation ansible-doc can show, as valid YAML with the keys it needs
(a parse error hides a module from ansible-doc and lint; a description YAML reads as two
keys shows half a sentence). ansible-test sanity (scripts/lib/sanity.sh) checks the rest."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PLUGINS = REPO / "plugins"
MODULES = sorted((PLUGINS / "modules").glob("*.py"))
ACTIONS = sorted((PLUGINS / "action").glob("*.py"))
FILTER_FILES = sorted((PLUGINS / "filter").glob("*.py"))
FILTER_DOCS = sorted((PLUGINS / "filter").glob("*.yml"))
RETURN_KEYS = {"description", "returned", "type", "elements", "sample", "contains", "version_added"}


def doc_blocks(path: Path) -> dict[str, str]:
    blocks = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                blocks[name] = node.value.value
    return blocks


def return_problems(entries: dict, where: str = "") -> list[str]:
    """Keys a RETURN entry may not have: what an unquoted `,` or `: ` in a flow-style
    description turns the rest of the sentence into."""
    problems = []
    for name, entry in entries.items():
        extra = set(entry) - RETURN_KEYS
        if extra:
            problems.append(f"{where}{name}: {sorted(extra)}")
        problems += return_problems(entry.get("contains") or {}, f"{where}{name}.")
    return problems


def filter_names(path: Path) -> set[str]:
    plugin = importlib.import_module(f"ansible_collections.specfleet.fleet.plugins.filter.{path.stem}")
    return set(plugin.FilterModule().filters())


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_docs_parse(path):
    blocks = doc_blocks(path)
    assert {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= set(blocks), f"{path.name} has only {sorted(blocks)}"
    documentation = yaml.safe_load(blocks["DOCUMENTATION"])
    assert documentation["module"] == path.stem
    assert {"short_description", "description", "author"} <= set(documentation), path.name
    yaml.safe_load(blocks["EXAMPLES"])
    assert return_problems(yaml.safe_load(blocks["RETURN"]) or {}) == []


@pytest.mark.parametrize("path", ACTIONS, ids=lambda p: p.name)
def test_action_documented_by_its_module(path):
    # ansible-doc shows an action plugin's documentation only from the module of its name.
    assert not doc_blocks(path), f"{path.name}: documentation belongs in plugins/modules/{path.name}"
    stub = PLUGINS / "modules" / path.name
    assert stub.exists(), f"{path.name} has no doc-only module"
    documentation = yaml.safe_load(doc_blocks(stub)["DOCUMENTATION"])
    assert "specfleet.fleet.attributes.action" in documentation["extends_documentation_fragment"]
    # Docs only: no code that could run if the module were ever sent to a unit.
    body = ast.parse(stub.read_text()).body
    assert all(isinstance(node, ast.Assign | ast.Expr | ast.ImportFrom) for node in body), stub.name


def test_every_filter_has_its_doc():
    names = set().union(*(filter_names(path) for path in FILTER_FILES))
    assert names == {path.stem for path in FILTER_DOCS}


@pytest.mark.parametrize("path", FILTER_DOCS, ids=lambda p: p.name)
def test_filter_docs_parse(path):
    doc = yaml.safe_load(path.read_text())
    assert {"DOCUMENTATION", "EXAMPLES", "RETURN"} <= set(doc), path.name
    assert doc["DOCUMENTATION"]["name"] == path.stem
    assert {"short_description", "description", "options"} <= set(doc["DOCUMENTATION"]), path.name
    assert "_input" in doc["DOCUMENTATION"]["options"], path.name
    yaml.safe_load(doc["EXAMPLES"])
    assert set(doc["RETURN"]) == {"_value"}, path.name


def test_callback_docs_parse():
    path = PLUGINS / "callback" / "specfleet_summary.py"
    documentation = yaml.safe_load(doc_blocks(path)["DOCUMENTATION"])
    assert documentation["name"] == path.stem
    assert {"type", "short_description", "description", "requirements"} <= set(documentation)
