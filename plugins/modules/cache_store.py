#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: cache_store
short_description: Inspect or switch in a versioned file store (HF hub repo, compile cache) on a unit
description:
  - A store is a directory tree described by a manifest (sha256 and size per file,
    symlink targets), written at the source with C(specfleet cache manifest).
  - The live path C(<root>/<subdir>/<name>) is a symlink to C(<root>/.specfleet/versions/<name>/<id>);
    copies arrive in C(<root>/.specfleet/incoming/<name>/<id>) (rsync it there, resumably).
  - O(state=inspect) reports whether the live store already matches the manifest, the free
    disk and the bytes a copy must transfer. Read-only.
  - O(state=active) verifies the staged copy file by file against the manifest and, only
    when all match, switches it in with one atomic rename; a partial or corrupt copy never
    replaces the live store, and corrupt files are removed from staging so the next copy
    fetches them again. Already live and verified means no change.
  - A repair (the live version is the manifest's but does not verify) puts the verified copy
    beside the broken one, switches the live link to it and only then removes the broken
    one, so a kill at any moment leaves the live path resolving to a whole version.
  - O(state=active) also removes the versions a killed switch left behind (RV(stale_versions)),
    once the live store is up to date.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  root:
    description: Directory holding the stores (e.g. the HF_HOME the container mounts).
    type: path
    required: true
  subdir:
    description: Directory below O(root) for the live path (C(hub) for Hugging Face).
    type: str
    default: ""
  manifest:
    description: The store's manifest (C(name), C(id), C(files), C(symlinks)).
    type: dict
    required: true
  state:
    description: C(inspect) reads; C(active) makes the manifest's version live.
    type: str
    choices: [inspect, active]
    default: inspect
  verify:
    description:
      - How O(state=inspect) checks a live store. C(quick) compares sizes, C(full)
        re-hashes every file (slow on large models; catches corrupted bytes).
    type: str
    choices: [quick, full]
    default: quick
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Is the model already there?
  specfleet.fleet.cache_store:
    root: /var/lib/specfleet/huggingface
    subdir: hub
    manifest: "{{ lookup('file', 'store/manifests/models--org--name.json') | from_json }}"
  register: inspected

- name: Switch in the copy rsync placed in inspected.staging_dir
  specfleet.fleet.cache_store:
    root: /var/lib/specfleet/huggingface
    subdir: hub
    manifest: "{{ lookup('file', 'store/manifests/models--org--name.json') | from_json }}"
    state: active
"""

RETURN = r"""
up_to_date: {description: The live store is the manifest's version and verifies., returned: always, type: bool}
current_id: {description: "Live version id, or null.", returned: always, type: str}
wanted_id: {description: The manifest's version id., returned: always, type: str}
live_path: {description: The live symlink., returned: always, type: str}
staging_dir: {description: Where a copy of this version must arrive., returned: always, type: str}
link_dest:
  description: Live version directory to hard-link unchanged files from, or null.
  returned: always
  type: str
free_bytes: {description: Free bytes on the store's filesystem., returned: always, type: int}
needed_bytes: {description: Bytes a copy must still transfer (0 when up to date)., returned: always, type: int}
staging_fits:
  description:
    - Whether the filesystem the copy is staged on has room for what it must still transfer.
      False after a copy that failed means the disk filled up (whatever rsync managed to say).
  returned: always
  type: bool
stale_versions:
  description:
    - Entries of C(<root>/.specfleet/versions/<name>) the live link does not resolve to, left by
      a switch that was killed before it removed them. O(state=active) removes them.
  returned: always
  type: list
  elements: str
problems:
  description: Files that did not match the manifest.
  returned: when not up to date or on failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
    StoreLayout,
    drop_stale_versions,
    inspect_store,
    promote,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "subdir": {"type": "str", "default": ""},
            "manifest": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["inspect", "active"], "default": "inspect"},
            "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
        },
        supports_check_mode=True,
    )
    manifest = module.params["manifest"]
    for key in ("name", "id", "files", "symlinks"):
        if key not in manifest:
            module.fail_json(msg=f"cache_store: manifest has no {key!r}; write it with `specfleet cache manifest`")
    layout = StoreLayout(module.params["root"], module.params["subdir"], manifest["name"])
    result = inspect_store(layout, manifest, module.params["verify"] == "full")
    stale = "".join(f"{layout.versions}/{name}\n" for name in result["stale_versions"])
    result["diff"] = {
        "before": f"{layout.live} -> {result['current_id']}\n{stale}",
        "after": f"{layout.live} -> {result['wanted_id']}\n",
    }
    settled = result["up_to_date"] and not result["stale_versions"]
    if module.params["state"] == "inspect" or settled:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)
    if result["up_to_date"]:
        # What a switch killed after it had switched (before it removed the old) left behind.
        drop_stale_versions(layout)
        module.exit_json(changed=True, **{**result, "stale_versions": []})
    problems = promote(layout, manifest)
    if problems:
        module.fail_json(
            msg=f"cache_store: the copy of {manifest['name']} does not match its manifest; "
            f"the live store was left as it was: {'; '.join(problems[:10])}",
            **{**result, "problems": problems},
        )
    # Whatever stale versions there were, promote removed them after the switch.
    result.update(up_to_date=True, current_id=manifest["id"], needed_bytes=0, problems=[], stale_versions=[])
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
