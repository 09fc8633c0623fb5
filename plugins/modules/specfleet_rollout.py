# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the specfleet_rollout action plugin (plugins/action/specfleet_rollout.py).

ansible-doc reads a plugin's documentation from the module of its name; the action
plugin does the work, on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_rollout
short_description: Take one step of a unit's rollout and say what it serves and records next
description:
  - Runs on the controller only. The rollout playbook sequences serve, bench, serve, bench,
    decide and apply; at each step it calls this action with what happened, and the action
    sets the fact C(specfleet_rollout), the unit's rollout state, from pure functions of the
    C(specfleet) package (C(specfleet.rollout)).
  - Reads the unit's C(specfleet_plan) (from M(specfleet.fleet.specfleet_plan)), its
    C(specfleet_policy) (the gate's thresholds), C(specfleet_run_id) and the current
    C(specfleet_rollout) state.
  - C(start) places the plan's servings on the unit (environment, mounts, secret names),
    reads the release record and finds an earlier decision for the candidate. A unit whose
    key's canary (C(specfleet_canaries)) failed with its candidate serves its baseline only, and
    C(start) sets its C(specfleet_plan) fact to that; a canary whose class sweeps the draft
    length measures each one, and the key's other units take the one it chose (C(start) sets
    their C(specfleet_plan) fact to it);
    a record with a trial marker (a run that was killed or lost its unit before it recorded its
    decision) names the known-good to serve first, also for a refused plan; C(trial_rolled_back)
    says it serves, C(trial_rollback_did_not_start) that it did not (the unit is measured from its
    baseline); a record that cannot be read fails the step with C(failure_class)
    C(release_record_unreadable), naming the host and the file, which nothing overwrites;
    C(earlier_did_not_start) measures again when that decided serving no longer starts;
    where the unit holds both servings (the plan's C(side_by_side)) the baseline serves with its
    share and the candidate starts beside it in the trial container, and a start beside the other
    that runs out of memory starts alone (C(baseline_did_not_start), C(candidate_did_not_start);
    C(replacement_did_not_start) takes a failed start of what was started in its place), every
    later block then restarting its side;
    C(baseline_serving) makes the serving baseline the known-good unless another is, puts the
    trial marker on the record (saved before any candidate starts) and starts the measurement;
    C(block_measured) takes one block's bench (baseline, speculative,
    baseline, then more pairs while the gate asks) and, after a baseline block that follows a
    speculative one, gates them all (on a keep the candidate serves again as the known-good,
    on a revert the known-good serves; a revert for the primary workload's c=8 regression alone,
    where the plan has a C(batch_table), first measures the candidate with a per-batch-size table
    on its own blocks); C(candidate_did_not_start) starts the plan's lighter
    variant (C(oom_retry)) once when the candidate ran out of memory at start, and otherwise fails
    with the start's own C(failure_class), C(decisive_lines) and C(failed_task) (the candidate with
    its table not starting is reverted as measured without it); C(decided_started) says the decided
    serving started (one measured with its share is the known-good from then on); C(failed) says
    why a step failed and starts the rollback to the known-good; C(rollback_did_not_start) falls
    back to this run's measured baseline, then to nothing; C(rolled_back) records what the rollback started; C(finish)
    makes the unit's outcome and records the decision for the candidate, clearing the trial marker.
  - C(rollback) is the start of the playbook C(specfleet.fleet.rollback) (the record's known-good; a
    trial marker is cleared once it serves).
version_added: "0.2.0"
author: specfleet contributors (@specfleet)
options:
  step:
    description: The step that just happened, or the one to take.
    type: str
    required: true
    choices: [start, trial_rolled_back, trial_rollback_did_not_start, earlier_did_not_start, baseline_did_not_start,
              baseline_serving, candidate_did_not_start, replacement_did_not_start, block_measured, decided_started,
              failed, rollback_did_not_start, rolled_back, finish, rollback]
  record:
    description:
      - The unit's release record as read, null when the unit has none; C(start) and C(rollback).
      - A record that is there but cannot be read (empty, not JSON, not an object, an unknown
        version) fails the step; it is never taken for an empty one.
    type: str
  record_path:
    description: Where the record is on the unit, for the error about a record that cannot be read; C(start) and
      C(rollback).
    type: str
  serve_env:
    description: The serving container's environment; C(start).
    type: dict
  serve_mounts:
    description: The serving container's mounts, C(HOST:CONTAINER); C(start).
    type: list
    elements: str
  secret_env_names:
    description: Names of the secret variables the container gets (never their values); C(start).
    type: list
    elements: str
  remeasure:
    description: Measure again even when an earlier run decided for the same candidate; C(start).
    type: bool
    default: false
  failure_class:
    description: Why the serving did not start (the launch module's class);
      C(trial_rollback_did_not_start), C(earlier_did_not_start) and C(rollback_did_not_start).
    type: str
  bench:
    description: The M(specfleet.fleet.spec_bench) result of the block that completed; C(block_measured).
    type: dict
  started:
    description:
      - The result of the block's serving start (M(specfleet.fleet.vllm_container)), for the report; C(block_measured).
      - Its C(resolved_speculative_config), C(startup_seconds) and C(compile_cache) are read; a serving that was
        already up reports no C(startup_seconds).
    type: dict
  task:
    description: The name of the task that failed; C(baseline_did_not_start), C(candidate_did_not_start),
      C(replacement_did_not_start) and C(failed).
    type: str
  result:
    description: The failed task's result; C(baseline_did_not_start), C(candidate_did_not_start),
      C(replacement_did_not_start) and C(failed).
    type: dict
extends_documentation_fragment:
  - specfleet.fleet.attributes
  - specfleet.fleet.attributes.action
  - specfleet.fleet.attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Computes the next state only; C(changed) is always false.
"""

EXAMPLES = r"""
- name: Start from the plan, the record and any earlier decision for this candidate
  specfleet.fleet.specfleet_rollout:
    step: start
    record: "{{ specfleet_release_raw.content | b64decode if specfleet_release_stat.stat.exists else none }}"
    record_path: "{{ specfleet_release_file }}"
    serve_env: "{{ specfleet_serve_env }}"
    serve_mounts: "{{ specfleet_serve_mounts }}"
    secret_env_names: "{{ specfleet_secret_env_names }}"

- name: Serve the baseline
  ansible.builtin.include_role:
    name: specfleet.fleet.specfleet_serve
  vars:
    specfleet_serve_spec: "{{ specfleet_rollout.baseline }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts for the host.
  returned: success
  type: dict
  contains:
    specfleet_rollout:
      description:
        - The unit's rollout state. C(record) is the release record to save; C(baseline) and
          C(candidate) the servings placed on the unit; C(serve) the serving to start next
          (null for none); C(next) and C(next_serving) the side and serving to measure next
          (null when measuring is over), C(next_output_check) whether that block runs the
          output check (a serving's first block only), C(next_nonce_salt) the salt of its
          requests' nonces (a serving measured again), C(next_beside) whether that serving starts
          beside the serving one (the trial container), C(measured_baseline) the baseline as
          measuring serves it, C(blocks) the blocks measured so far; C(outcome) the
          unit's result so far and C(unit_record) its file for the report; C(done) means nothing
          more to measure, C(failed) that the unit counts as failed; C(interrupted_trial) the trial
          an earlier run left unfinished (C(known_good) the serving to put back first, C(reason)
          what became of it), null when there is none.
      returned: success
      type: dict
failure_class:
  description: Why the candidate did not start (the launch module's class), when C(candidate_did_not_start) fails;
    C(release_record_unreadable) when C(start) or C(rollback) fails on the record.
  returned: failure
  type: str
decisive_lines:
  description: The start's decisive log lines, when C(candidate_did_not_start) fails.
  returned: failure
  type: list
  elements: str
failed_task:
  description: The task that failed first, when C(candidate_did_not_start) fails.
  returned: failure
  type: str
"""
