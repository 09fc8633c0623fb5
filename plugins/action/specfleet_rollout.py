# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""One step of a unit's rollout: what it serves next, what it records (controller only).

The decisions are pure functions in specfleet.rollout; this plugin hands them the step's
inputs and the unit's rollout state (the fact ``specfleet_rollout``), and sets the new
state as that fact. At the start, a unit whose key's canary (specfleet.sweep,
``specfleet_canaries`` from facts.yml) failed has its plan (the fact ``specfleet_plan``) set
to its baseline only, and one whose canary chose a draft length to that length, for the rest
of its rollout. Its documentation is the doc-only module
plugins/modules/specfleet_rollout.py, where ansible-doc reads it.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import ControllerAction

try:
    from specfleet import release, rollout, runs, sweep
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None

STEPS = ("start", "trial_rolled_back", "trial_rollback_did_not_start", "earlier_did_not_start",
         "baseline_did_not_start", "baseline_serving", "candidate_did_not_start", "replacement_did_not_start",
         "block_measured", "decided_started", "failed", "rollback_did_not_start", "rolled_back", "finish", "rollback")
# The steps after a start that failed: with nothing to start in its place, they fail as it failed.
START_FAILURES = ("baseline_did_not_start", "candidate_did_not_start", "replacement_did_not_start")
# What each step reads from its arguments (the rest comes from the unit's variables).
ARGUMENTS = {
    "start": ("record", "record_path", "serve_env", "serve_mounts", "secret_env_names", "remeasure"),
    "trial_rollback_did_not_start": ("failure_class",),
    "earlier_did_not_start": ("failure_class",),
    "baseline_did_not_start": ("task", "result"),
    "candidate_did_not_start": ("task", "result"),
    "replacement_did_not_start": ("task", "result"),
    "block_measured": ("bench", "started"),
    "failed": ("task", "result"),
    "rollback_did_not_start": ("failure_class",),
    "rollback": ("record", "record_path"),
}


class ActionModule(ControllerAction):
    specfleet_import_error = SPECFLEET_IMPORT_ERROR

    def act(self, result, task_vars):
        step = self._task.args.get("step")
        if step not in STEPS:
            return {**result, "failed": True, "msg": f"step must be one of {', '.join(STEPS)}, got {step!r}"}
        unknown = sorted(set(self._task.args) - {"step", *ARGUMENTS.get(step, ())})
        if unknown:
            return {**result, "failed": True, "msg": f"step {step} takes no {', '.join(unknown)}"}
        args = {name: self._task.args.get(name) for name in ARGUMENTS.get(step, ())}
        plan = self._templar.template(task_vars.get("specfleet_plan"))
        if step != "rollback" and not plan:
            return {**result, "failed": True, "msg": "run specfleet_plan before specfleet_rollout"}
        state = None
        if step not in ("start", "rollback"):
            state = self._templar.template(task_vars.get("specfleet_rollout"))
            if not state:
                return {**result, "failed": True, "msg": f"step {step} needs a rollout started with step start"}
        run_id = task_vars.get("specfleet_run_id", "")
        facts = {}
        if step in ("start", "rollback"):
            try:
                release.parse(args["record"])
            except release.UnreadableRecord as exc:
                # Before anything on the unit is touched; nothing writes over the file.
                host = task_vars["inventory_hostname"]
                return {**result, "failed": True, "changed": False, "failure_class": "release_record_unreadable",
                        "msg": release.unreadable_message(host, args["record_path"] or "the release record", str(exc))}
        if step == "start":
            plan, sweeping = self._unit_plan(plan, args, task_vars)
            facts["specfleet_plan"] = plan
            args["sweeping"] = sweeping
            policy = self._templar.template(task_vars.get("specfleet_policy")) or {}
            args["max_blocks"] = int(policy.get("specfleet_gate_max_blocks") or 0)
        state = self._step(step, state, plan, args, task_vars, run_id)
        if step in START_FAILURES and state["serve"] is None:
            # Nothing to start in its place: fail as the start failed, for the rescue to roll back.
            failure = state["failure"]
            return {**result, "failed": True, "changed": False, "msg": failure["message"],
                    "failure_class": failure["failure_class"], "decisive_lines": failure["decisive_lines"],
                    "failed_task": failure["task"]}
        if step == "finish":  # what record.yml writes for the report, made once
            host = task_vars["inventory_hostname"]
            state["unit_record"] = rollout.unit_record(state, plan, host, run_id)
            # Where the unit's file goes: its run's folder.
            state["unit_record_path"] = str(runs.unit_file(runs.run_folder(run_id), host))
        return {**result, "changed": False, "ansible_facts": {**facts, "specfleet_rollout": state}}

    def _unit_plan(self, plan, args, task_vars):
        """The plan this unit rolls out with (its key's canary failed: the baseline only; a sweep
        key's choice), and whether it is its key's canary and sweeps."""
        canaries = self._templar.template(task_vars.get("specfleet_canaries")) or {}
        canary = sweep.canary_of(plan, canaries)
        canary_state = None
        if canary and canary != task_vars["inventory_hostname"]:
            canary_state = self._templar.template(task_vars["hostvars"][canary].get("specfleet_rollout"))
        return sweep.unit_plan(plan, task_vars["inventory_hostname"], canaries, release.parse(args["record"]),
                               canary_state, boolean(args["remeasure"], strict=True))

    def _step(self, step, state, plan, args, task_vars, run_id):
        if step == "start":
            return rollout.start(plan, args["record"], args["serve_env"] or {}, args["serve_mounts"] or [],
                                 args["secret_env_names"] or [], boolean(args["remeasure"], strict=True),
                                 args["sweeping"], args["max_blocks"])
        if step == "rollback":
            return rollout.rollback(args["record"])
        if step in ("trial_rollback_did_not_start", "earlier_did_not_start", "rollback_did_not_start"):
            return getattr(rollout, step)(state, args["failure_class"] or "failed")
        if step == "baseline_serving":
            return rollout.baseline_serving(state, plan, run_id)
        if step in ("trial_rolled_back", "rolled_back", "decided_started"):
            return getattr(rollout, step)(state)
        if step == "baseline_did_not_start":
            return rollout.baseline_did_not_start(state, args["task"] or "?", args["result"] or {})
        if step in ("candidate_did_not_start", "replacement_did_not_start"):
            policy = self._templar.template(task_vars.get("specfleet_policy"))
            return getattr(rollout, step)(state, plan, args["task"] or "?", args["result"] or {}, policy)
        if step == "block_measured":
            policy = self._templar.template(task_vars.get("specfleet_policy"))
            return rollout.block_measured(state, plan, args["bench"], policy, args["started"])
        if step == "failed":
            return rollout.failed(state, args["task"] or "?", args["result"] or {})
        return rollout.finish(state, run_id)
