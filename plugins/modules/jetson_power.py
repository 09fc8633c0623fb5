#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: jetson_power
short_description: Put a Jetson in its maximum-performance power mode with pinned clocks, and read both back
description:
  - Reads the power modes the unit defines (C(/etc/nvpmodel.conf)), the current one
    (C(nvpmodel -q)) and whether the clocks are pinned (C(jetson_clocks --show), where the
    GPU's minimum frequency then equals its maximum).
  - With O(state=present), selects the wanted mode (C(nvpmodel -m ID)) when it is not the
    current one, then pins the clocks (C(jetson_clocks)) when they are not; only outside check
    mode. A unit left in a low-power mode, or with clocks that still scale, benchmarks slower
    (NVIDIA's Jetson Linux power management docs; jetson-device-skills ask benchmarks to record
    both).
  - A unit without C(nvpmodel) (a DGX Spark, or no Jetson) is reported as such and left alone.
  - The clock pinning does not survive a reboot (the mode does); the rollout runs this before it
    measures.
version_added: "0.3.0"
author: specfleet contributors (@specfleet)
options:
  mode:
    description:
      - C(maxn) selects the mode whose name starts with MAXN (MAXN, MAXN_SUPER); a number
        selects that mode id.
    type: str
    default: maxn
  clocks:
    description: Pin the clocks with C(jetson_clocks) after the mode is set.
    type: bool
    default: true
  state:
    description: C(present) sets what differs; C(query) only reads.
    type: str
    choices: [present, query]
    default: present
  conf:
    description: The unit's power mode definitions.
    type: path
    default: /etc/nvpmodel.conf
  nvpmodel:
    description: Path of the nvpmodel tool.
    type: path
    default: /usr/sbin/nvpmodel
  jetson_clocks:
    description: Path of the jetson_clocks tool.
    type: path
    default: /usr/bin/jetson_clocks
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
    details: Reports what it would change; runs only the read commands.
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Some mode changes ask for a reboot (nvpmodel prompts for it); this module answers no, and
    the mode read back is then still the old one, which the result and the report show.
"""

EXAMPLES = r"""
- name: Maximum performance before benchmarking
  specfleet.fleet.jetson_power:
  register: power

- name: Only read the power mode
  specfleet.fleet.jetson_power:
    state: query
"""

RETURN = r"""
power:
  description: The unit's power state after the change.
  returned: always
  type: dict
  contains:
    available: {description: The unit has nvpmodel (a Jetson)., type: bool, returned: always}
    mode_id: {description: Current nvpmodel mode id., type: int, returned: when available}
    mode: {description: Current nvpmodel mode name., type: str, returned: when available}
    wanted_mode: {description: Name of the mode asked for., type: str, returned: when available}
    at_wanted_mode: {description: The current mode is the one asked for., type: bool, returned: when available}
    clocks_pinned:
      description: GPU clocks pinned at their maximum (null when jetson_clocks is missing).
      type: bool
      returned: when available
    summary:
      description: One line for people, for example C(MAXN, clocks pinned).
      type: str
      returned: always
changes:
  description: What was (or in check mode would be) changed, C(mode) and C(clocks).
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

_MODE_RE = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)\s*>")
_QUERY_NAME_RE = re.compile(r"NV Power Mode:\s*(\S+)")
_GPU_CLOCKS_RE = re.compile(r"^GPU MinFreq=(\d+) MaxFreq=(\d+) CurrentFreq=(\d+)", re.MULTILINE)


def parse_modes(conf_text: str) -> dict[int, str]:
    """Mode id -> name, from nvpmodel.conf's `< POWER_MODEL ID=0 NAME=MAXN >` lines."""
    return {int(number): name for number, name in _MODE_RE.findall(conf_text)}


def parse_query(output: str) -> tuple[int | None, str | None]:
    """(id, name) from `nvpmodel -q`: the name line, then the id alone on a line."""
    name = _QUERY_NAME_RE.search(output)
    number = next((int(line.strip()) for line in output.splitlines() if line.strip().isdigit()), None)
    return number, name.group(1) if name else None


def clocks_pinned(show_output: str) -> bool | None:
    """From `jetson_clocks --show`: the GPU's minimum frequency is its maximum (None: no GPU line)."""
    found = _GPU_CLOCKS_RE.search(show_output)
    return None if found is None else found.group(1) == found.group(2)


def wanted_mode(modes: dict[int, str], mode: str) -> tuple[int | None, str]:
    """The (id, name) asked for, or (None, why) when the unit has no such mode."""
    listed = ", ".join(f"{number}={name}" for number, name in sorted(modes.items())) or "none"
    if mode.strip().lower() == "maxn":
        found = sorted(number for number, name in modes.items() if name.upper().startswith("MAXN"))
        if not found:
            return None, f"no mode named MAXN* (modes: {listed})"
        return found[0], modes[found[0]]
    if not mode.strip().isdigit() or int(mode) not in modes:
        return None, f"no mode {mode!r} (modes: {listed})"
    return int(mode), modes[int(mode)]


def changes_needed(current_id: int | None, wanted_id: int, pinned: bool | None, pin: bool) -> list[str]:
    changes = [] if current_id == wanted_id else ["mode"]
    if pin and (pinned is False or "mode" in changes):
        changes.append("clocks")  # a mode change resets the clocks to the new mode's range
    return changes


def summary(mode: str | None, at_wanted: bool, pinned: bool | None, wanted: str) -> str:
    clocks = {True: "clocks pinned", False: "clocks not pinned", None: "clocks unknown"}[pinned]
    return f"{mode or '?'}{'' if at_wanted else f' (not {wanted})'}, {clocks}"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "default": "maxn"},
            "clocks": {"type": "bool", "default": True},
            "state": {"type": "str", "choices": ["present", "query"], "default": "present"},
            "conf": {"type": "path", "default": "/etc/nvpmodel.conf"},
            "nvpmodel": {"type": "path", "default": "/usr/sbin/nvpmodel"},
            "jetson_clocks": {"type": "path", "default": "/usr/bin/jetson_clocks"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not os.path.exists(params["nvpmodel"]):
        module.exit_json(changed=False, changes=[],
                         power={"available": False, "summary": "no nvpmodel (not a Jetson)"})
    try:
        with open(params["conf"], encoding="utf-8") as handle:
            modes = parse_modes(handle.read())
    except OSError as exc:
        module.fail_json(msg=f"jetson_power: cannot read {params['conf']}: {exc}")
    wanted_id, wanted_name = wanted_mode(modes, params["mode"])
    if wanted_id is None:
        module.fail_json(msg=f"jetson_power: {params['conf']} has {wanted_name}; set specfleet_power_mode")

    def read() -> tuple[int | None, str | None, bool | None]:
        rc, out, err = module.run_command([params["nvpmodel"], "-q"])
        if rc != 0:
            module.fail_json(msg=f"jetson_power: nvpmodel -q failed ({rc}): {err.strip() or out.strip()}")
        number, name = parse_query(out)
        pinned = None
        if os.path.exists(params["jetson_clocks"]):
            rc, show, err = module.run_command([params["jetson_clocks"], "--show"])
            if rc != 0:
                module.fail_json(msg=f"jetson_clocks --show failed ({rc}): {err.strip() or show.strip()}")
            pinned = clocks_pinned(show)
        return number, name, pinned

    current_id, current_name, pinned = read()
    changes = []
    if params["state"] == "present":
        changes = changes_needed(current_id, wanted_id, pinned, params["clocks"] and pinned is not None)
    before = summary(current_name, current_id == wanted_id, pinned, wanted_name)
    if changes and not module.check_mode:
        if "mode" in changes:
            # A mode that needs a reboot makes nvpmodel ask; "no" keeps the unit up.
            rc, out, err = module.run_command([params["nvpmodel"], "-m", str(wanted_id)], data="NO")
            if rc != 0:
                module.fail_json(
                    msg=f"jetson_power: nvpmodel -m {wanted_id} failed ({rc}): {err.strip() or out.strip()}")
        if "clocks" in changes:
            rc, out, err = module.run_command([params["jetson_clocks"]])
            if rc != 0:
                module.fail_json(msg=f"jetson_power: jetson_clocks failed ({rc}): {err.strip() or out.strip()}")
        current_id, current_name, pinned = read()
        if current_id != wanted_id:
            module.warn(f"mode {wanted_id} ({wanted_name}) did not take: nvpmodel may need a reboot for it")
    after = before if module.check_mode else summary(current_name, current_id == wanted_id, pinned, wanted_name)
    if module.check_mode and changes:
        after = summary(wanted_name, True, True if "clocks" in changes else pinned, wanted_name)
    power = {
        "available": True,
        "mode_id": current_id,
        "mode": current_name,
        "wanted_mode": wanted_name,
        "at_wanted_mode": current_id == wanted_id,
        "clocks_pinned": pinned,
        "summary": after,
    }
    module.exit_json(changed=bool(changes), changes=changes, power=power,
                     diff={"before": f"power: {before}\n", "after": f"power: {after}\n"})


if __name__ == "__main__":
    main()
