#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: unit_state
short_description: Ask in one round trip whether a unit is already as a role leaves it
description:
  - Each prepare role lists what it leaves on a unit as O(checks) and asks them all at once.
    When every check holds (RV(holds)), the role skips its own tasks; a no-change re-run
    then costs one round trip per role.
  - The checks are strict. What they cannot read does not hold, and the role's own tasks
    then run and decide.
  - Reads only; never changes anything.
version_added: "0.9.0"
author: specfleet contributors (@specfleet)
options:
  checks:
    description:
      - What to look at, one dict per check, each with a C(kind) and that kind's fields.
      - C(file) (C(path); optional C(sha256), C(owner), C(group), C(mode), C(mine)),
        C(directory) (C(path); optional C(owner), C(group), C(mode), C(mine)),
        C(absent) (C(path)), C(link) (C(path), C(src)).
        C(mine) means owned by the account the module runs as.
      - C(packages) (C(names), installed as dpkg says), C(executable) (C(name), as C(command -v)
        finds it), C(service) (C(name), running), C(group_members) (C(group), C(users)).
      - C(dockerd) (C(path) of daemon.json, C(pidfile)) holds when the running dockerd loaded the
        file as it is now; its detail carries the file's text.
      - C(docker_runtime) (C(name), C(default)), C(docker_image) (C(ref); optional C(digest)).
      - C(store) (C(root), C(subdir), C(manifest)) holds when the live store is the manifest's
        version, by size, with no stale version left; its detail is the inspection that
        M(specfleet.fleet.cache_store) returns.
      - C(room) (C(needs), a list of C(path) and C(bytes); optional C(spare) bytes) holds when
        each filesystem has room for the needs that land on it, added up, plus C(spare); its
        detail lists per filesystem the paths, C(free) and C(needed) bytes.
    type: list
    elements: dict
    required: true
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
    details: Reads only, in check mode as outside it.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Is the unit already as this role leaves it?
  specfleet.fleet.unit_state:
    checks:
      - {kind: packages, names: [docker.io, rsync]}
      - {kind: directory, path: /var/lib/specfleet, owner: root, group: root, mode: "0755"}
      - {kind: service, name: docker}
  register: already

- name: Bring the unit to it
  ansible.builtin.include_tasks: converge.yml
  when: not already.holds
"""

RETURN = r"""
holds:
  description: Every check holds.
  returned: always
  type: bool
results:
  description: One per check, in order.
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description: The check's kind.
      type: str
    subject:
      description: What it looked at (a path, a name, an image).
      type: str
    holds:
      description: Whether it is as the check wants.
      type: bool
    detail:
      description: What was seen (a kind's data, or one line for people).
      type: raw
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_state import evaluate


def main() -> None:
    module = AnsibleModule(
        argument_spec={"checks": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    try:
        answer = evaluate(module.params["checks"], lambda argv: module.run_command(argv))
    except ValueError as exc:
        module.fail_json(msg=f"unit_state: {exc}")
    module.exit_json(changed=False, **answer)


if __name__ == "__main__":
    main()
