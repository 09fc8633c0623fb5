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
