# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Inspect or fill the controller-side compile-cache store of one key."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_compile_cache
short_description: Inspect or fill the controller's compile-cache store of one key
description:
  - Runs on the controller only (the store is controller-side). The store of a key is
    C(<store>/compile-cache/<key>/), laid out as a store for C(specfleet distribute)
    (subdir C(torch_compile_cache), one entry per vLLM hash directory, manifests).
  - O(state=inspect) reports whether the store is complete (key.json and every entry live
    and matching its manifest). Read-only.
  - O(state=collect) switches a golden unit's fetched cache root into the store (marker,
    manifest and an atomic switch per entry, key.json last). Never leaves a store that
    inspects as present unless it is complete.
options:
  store:
    description: Controller store directory.
    type: path
    required: true
  key:
    description: Compile-cache key (specfleet_compile_cache_key filter).
    type: str
    required: true
  state:
    description: C(inspect) reads; C(collect) fills the store from O(fetched).
    type: str
    choices: [inspect, collect]
    default: inspect
  fetched:
    description: The golden unit's cache root, fetched to the controller (collect).
    type: path
  record:
    description: What to record in key.json (factors, golden unit, its startup seconds).
    type: dict
    default: {}
  verify:
    description: C(full) re-hashes every file of the store, C(quick) compares sizes.
    type: str
    choices: [quick, full]
    default: full
attributes:
  check_mode: {support: full}
  diff_mode: {support: none}
  idempotent: {support: full}
"""

from pathlib import Path

from ansible.plugins.action import ActionBase

from specfleet import prewarm


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
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
