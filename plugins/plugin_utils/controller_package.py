# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The `specfleet` Python package behind the collection's controller-side plugins.

The action, filter and callback plugins wrap the `specfleet` package, which is installed
with pip on the controller (requirements.txt) rather than shipped in the collection.
Ansible imports every plugin of a collection to list or document it (ansible-doc,
ansible-test sanity), also where the package is missing, so the plugins import it in
try/except ImportError and fail only when they are used, saying what to install.
"""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

MISSING_MESSAGE = (
    "the specfleet.fleet collection's controller-side plugins need the `specfleet` Python package "
    "on the controller: pip install specfleet (see the collection's requirements.txt)"
)


def require_specfleet(import_error: ImportError | None) -> None:
    """Raise the error saying what to install when the plugin's `specfleet` import failed."""
    if import_error is not None:
        raise AnsibleError(f"{MISSING_MESSAGE}; the import failed with: {import_error}") from import_error


class MissingSpecfleet:
    """Stands in for the `specfleet` modules a filter plugin could not import.

    Ansible lists a file's filters by calling FilterModule.filters(), so that must name
    every filter without the package; a filter taken from this stand-in raises the error
    of require_specfleet when it is called.
    """

    def __init__(self, import_error: ImportError) -> None:
        self._import_error = import_error

    def __getattr__(self, name: str):
        def unavailable(*args, **kwargs):
            require_specfleet(self._import_error)

        return unavailable


class ControllerAction(ActionBase):
    """An action that runs on the controller only, over the `specfleet` package: no connection
    to the unit, check mode supported (the actions change nothing on a unit themselves). A
    subclass sets ``specfleet_import_error`` to what its guarded `specfleet` import raised (None
    when it succeeded) and does its work in ``act``."""

    _requires_connection = False
    _supports_check_mode = True
    specfleet_import_error: ImportError | None = None

    def run(self, tmp=None, task_vars=None):
        require_specfleet(self.specfleet_import_error)
        return self.act(super().run(tmp, task_vars), task_vars or {})

    def act(self, result: dict, task_vars: dict) -> dict:
        """The action's work: ``result`` is ActionBase's, ``task_vars`` the task's variables."""
        raise NotImplementedError
