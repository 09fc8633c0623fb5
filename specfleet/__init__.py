"""specfleet's controller package: plan, gate, release record, report, cache and CLI.

The unit-side code that the controller shares with the modules (the identity parser, the
store manifests, the bench prompts) lives once, in the specfleet.fleet collection's
``plugins/module_utils``, and is imported from there as
``ansible_collections.specfleet.fleet.plugins.module_utils``. Inside Ansible the collection
loader already makes it importable; elsewhere (the ``specfleet`` CLI, tests) importing this
package installs Ansible's collection loader over the configured collections paths, with
the checkout's own ``collections/`` first when the package runs from a checkout.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

COLLECTION = "specfleet.fleet"
_UNIT_CODE = "ansible_collections.specfleet.fleet.plugins.module_utils"


class CollectionMissing(ImportError):
    """The specfleet.fleet collection cannot be found on the collections paths."""


def _make_unit_code_importable() -> None:
    try:
        importlib.import_module(_UNIT_CODE)
        return
    except ImportError:
        # A failed attempt leaves `ansible_collections` bound to a plain namespace package,
        # which would shadow the collection loader installed next.
        for name in [name for name in sys.modules if name.split(".")[0] == "ansible_collections"]:
            del sys.modules[name]
    from ansible.plugins.loader import init_plugin_loader

    checkout = Path(__file__).resolve().parents[1] / "collections"
    init_plugin_loader([str(checkout)] if (checkout / "ansible_collections").is_dir() else None)
    try:
        importlib.import_module(_UNIT_CODE)
    except ImportError as exc:
        raise CollectionMissing(
            f"the {COLLECTION} collection is not installed where Ansible looks for collections: "
            f"run `ansible-galaxy collection install` with its tarball, or set collections_path"
        ) from exc


_make_unit_code_importable()
