"""Imports run one way: the product's modules sit in layers, each imports only its own layer
and those below it, and no two modules import each other, directly or round a loop.

Read from the source (every import statement, at module level or inside a function), so the
test needs no import side effect to pass and a lazy import cannot hide a loop.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "ansible_collections.specfleet.fleet"

# Bottom to top. A module may import its own layer and the layers before it.
LAYERS: dict[str, tuple[str, ...]] = {
    # What runs on a unit and the contracts the controller shares with it: stdlib and
    # ansible.module_utils only.
    "unit contracts": (f"{COLLECTION}.plugins.module_utils",),
    "unit modules": (f"{COLLECTION}.plugins.modules",),
    # The controller's decisions: plan, serving, gate, sweep, release, rollout, policy and the
    # checks and keys they read. Pure functions over plain data, plus the loaders they need.
    "controller core": tuple(f"specfleet.{name}" for name in (
        "batch_table", "bootstrap", "cache", "capability", "catalog", "daemon_json", "data", "event_key", "fanout",
        "gate", "inventory", "kserve", "loading", "paired", "plan", "plan_trtllm", "policy", "prewarm",
        "release", "render", "role_args", "rollout", "serving", "sweep", "unit_checks", "variables",
    )),
    # The operators' tools over what the core decided: the runs and their report, the
    # comparison of two runs, the console's wording, distribution, status and the store.
    "tools": tuple(f"specfleet.{name}" for name in (
        "attention", "compare", "console", "fanout_run", "hostkeys", "report", "runs", "status", "store",
    )),
    # What a user calls: the CLI and Ansible's controller-side plugins.
    "entry points": ("specfleet.cli", *(f"{COLLECTION}.plugins.{kind}" for kind in (
        "action", "callback", "doc_fragments", "filter", "lookup", "plugin_utils"))),
}


def module_name(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = relative.parts if relative.parts[0] == "specfleet" else (*COLLECTION.split("."), *relative.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    paths = [*REPO.glob("specfleet/**/*.py"), *REPO.glob("plugins/**/*.py")]
    return {module_name(path): path for path in paths}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules ``name`` imports (a ``from package import module`` names the
    module; an import of a package's own ``__init__`` by its modules is not an edge)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(f"{target}."):
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()
    return {name: imported(name, path, set(modules)) for name, path in modules.items()}


def layer_of(name: str) -> int | None:
    """The index of the layer a module belongs to (its own name or a package of it listed)."""
    for index, members in enumerate(LAYERS.values()):
        if any(name == member or name.startswith(f"{member}.") for member in members):
            return index
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_reads_imports_of_every_form():
    graph = import_graph()
    assert "specfleet.runs" in graph["specfleet.compare"]  # from specfleet import attention, runs
    assert f"{COLLECTION}.plugins.module_utils.jetson_identity" in graph["specfleet.policy"]
    assert "specfleet.status" in graph["specfleet.cli"]  # inside a function
    assert "specfleet.fanout_run" in graph["specfleet.hostkeys"]  # from specfleet.fanout_run import ...


def test_no_two_modules_import_each_other_round_a_loop():
    assert cycles(import_graph()) == []


def test_a_loop_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_every_module_of_the_product_has_a_layer():
    assert [name for name in product_modules() if name != "specfleet" and layer_of(name) is None] == []


def test_imports_run_one_way():
    names = list(LAYERS)
    against = [f"{name} ({names[layer_of(name)]}) imports {target} ({names[layer_of(target)]})"
               for name, targets in sorted(import_graph().items()) if name != "specfleet"
               for target in sorted(targets) if target != "specfleet" and layer_of(target) > layer_of(name)]
    assert against == []


def test_the_unit_side_imports_nothing_of_the_controller():
    """Modules and module_utils run on the units, where only they and python3 are."""
    unit_side = f"{COLLECTION}.plugins.modules", f"{COLLECTION}.plugins.module_utils"
    for name, path in product_modules().items():
        if name.startswith(unit_side):
            tree = ast.parse(path.read_text())
            roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
            roots |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and not node.level}
            assert "specfleet" not in roots, name


@pytest.mark.parametrize("statement", ["import specfleet", "import specfleet.cli", "from specfleet import report"])
def test_importing_the_controller_package_starts_no_ansible_loader(statement, tmp_path):
    """`import specfleet` has no side effect: its unit-side imports are plain imports of the
    installed collection, not of Ansible's collection loader. Run from an empty directory, as a
    user's `specfleet` command is."""
    probe = (f"{statement}\nimport sys\n"
             "print(sorted(name for name in sys.modules if name == 'ansible' or name.startswith('ansible.')))\n"
             "print(sorted(type(finder).__name__ for finder in sys.meta_path))\n"
             "import specfleet.plan; print(specfleet.plan.__file__)")
    # This tree's package and collection first, whatever checkout the venv's editable install names.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "collections")])}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=True)
    ansible_modules, finders, plan_file = done.stdout.splitlines()
    assert plan_file == str(REPO / "specfleet" / "plan.py")
    assert ansible_modules == "[]"
    assert "_AnsibleCollectionFinder" not in finders
