# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Inspect or fill the controller-side compile-cache store of one key.

Its documentation (options, return values) is the doc-only module plugins/modules/specfleet_compile_cache.py,
where ansible-doc reads it.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import ControllerAction

try:
    from specfleet import prewarm
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


class ActionModule(ControllerAction):
    specfleet_import_error = SPECFLEET_IMPORT_ERROR

    def act(self, result, task_vars):
        args = self._task.args
        state = args.get("state", "inspect")
        store = Path(str(args["store"])).expanduser()
        key = str(args["key"])
        try:
            if state == "inspect":
                result.update(prewarm.inspect_store(store, key, full=args.get("verify", "full") == "full"))
                result["changed"] = False
                return result
            if state != "collect":
                raise ValueError(f"state must be inspect or collect, not {state!r}")
            if self._task.check_mode:
                result.update(changed=True, msg=f"would collect {args.get('fetched')} into the store of {key}")
                return result
            result.update(prewarm.collect(store, key, Path(str(args["fetched"])), args.get("record") or {}))
            result["changed"] = True
        except (KeyError, OSError, ValueError) as exc:
            result.update(failed=True, msg=f"specfleet_compile_cache: {exc}")
        return result
