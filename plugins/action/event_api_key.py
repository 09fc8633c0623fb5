# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Make this event's vLLM API key once, vault-encrypted beside the inventory (specfleet.event_key).

Its documentation (options, return values) is the doc-only module plugins/modules/event_api_key.py,
where ansible-doc reads it.
"""

from __future__ import annotations

from pathlib import Path

from ansible import constants
from ansible.errors import AnsibleError
from ansible.parsing.vault import VaultLib, match_encrypt_secret
from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import ControllerAction

try:
    from specfleet import event_key
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


class ActionModule(ControllerAction):
    specfleet_import_error = SPECFLEET_IMPORT_ERROR

    def act(self, result, task_vars):
        args = self._task.args
        path = event_key.key_file(Path(str(args.get("inventory_dir") or task_vars["inventory_dir"])).expanduser())
        # As ansible-vault encrypt chooses: the vault id asked for (this task's, else ansible.cfg's
        # vault_encrypt_identity), else the run's only or first vault password.
        vault_id = str(args.get("vault_id") or constants.DEFAULT_VAULT_ENCRYPT_IDENTITY or "") or None
        result.update(path=str(path), changed=False)
        if path.exists():
            return result  # this event's key, made by an earlier run: never replaced
        # The vault passwords this run was given (--ask-vault-pass, --vault-id, ansible.cfg's
        # vault_identity_list): the loader holds them; Ansible has no public accessor.
        loaded = self._loader._vault.secrets or []
        try:
            matched = match_encrypt_secret(loaded, encrypt_vault_id=vault_id)
        except AnsibleError:
            matched = None
        if not matched:
            result.update(failed=True, msg=event_key.missing_vault_message(path, vault_id))
            return result
        vault_id, secret = matched
        result["changed"] = True
        if self._task.check_mode:
            return result
        plaintext = event_key.key_yaml(event_key.new_key())
        envelope = VaultLib(loaded).encrypt(plaintext, secret=secret, vault_id=vault_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, envelope, mode=0o600)
        return result
