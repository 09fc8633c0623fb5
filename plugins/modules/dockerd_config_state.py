#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: dockerd_config_state
short_description: Tell whether the running dockerd has loaded daemon.json as it is now
description:
  - dockerd reads its configuration file only when it starts. This module compares the
    running dockerd's start (its pidfile, then C(/proc/PID/stat) and C(/proc/uptime)) with
    the file's last write (mtime). A file written after the daemon started has not been
    loaded, and a restart is owed; for example because a run was interrupted after it
    replaced the file and before it restarted Docker, or because someone edited the file.
  - Reads only; never changes anything.
version_added: "0.3.0"
author: specfleet contributors (@specfleet)
options:
  path:
    description: Docker's daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  pidfile:
    description:
      - The running dockerd's pidfile. C(/var/run/docker.pid) is dockerd's default, under
        systemd (JetPack, Ubuntu) and under Debian's init script (the lab's units) alike.
    type: path
    default: /var/run/docker.pid
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
notes:
  - Like every comparison of a file's mtime, it assumes the wall clock did not step back
    between the file's write and the check.
"""

EXAMPLES = r"""
- name: Has the running Docker loaded daemon.json?
  specfleet.fleet.dockerd_config_state:
    path: /etc/docker/daemon.json
  register: daemon_state

- name: Restart Docker when it has not (a restart lost to an interrupted run)
  ansible.builtin.service:
    name: docker
    state: restarted
  when: not daemon_state.loaded
"""

RETURN = r"""
loaded:
  description:
    - True when a dockerd runs and started after the file was last written (or there is no
      file); false when it does not run or the file is newer than the daemon.
  returned: always
  type: bool
reason:
  description: One line for people saying why.
  returned: always
  type: str
  sample: >-
    dockerd (pid 212) started at 2025-05-02T10:01:07.120Z, after /etc/docker/daemon.json
    was last written at 2025-05-02T10:01:06.880Z
pid:
  description: The running dockerd's process id, or null when none runs.
  returned: always
  type: int
dockerd_started:
  description: When the running dockerd started (epoch seconds), or null.
  returned: always
  type: float
config_written:
  description: When the file was last written (epoch seconds), or null when there is none.
  returned: always
  type: float
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.dockerd_config import loaded, running_dockerd


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/docker/daemon.json"},
            "pidfile": {"type": "path", "default": "/var/run/docker.pid"},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        config_written = os.stat(path).st_mtime
    except FileNotFoundError:
        config_written = None
    except OSError as exc:
        module.fail_json(msg=f"dockerd_config_state: cannot stat {path}: {exc}")
    pid, dockerd_started = running_dockerd(module.params["pidfile"])
    is_loaded, reason = loaded(path, config_written, pid, dockerd_started)
    module.exit_json(
        changed=False,
        loaded=is_loaded,
        reason=reason,
        pid=pid,
        dockerd_started=dockerd_started,
        config_written=config_written,
    )


if __name__ == "__main__":
    main()
