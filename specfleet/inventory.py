"""Read an Ansible inventory the way ansible-playbook does: hosts, their variables, and the
facts to plan from (gathered facts files, else the inventory's declared expectation)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specfleet import loading
from specfleet import policy as policy_module

# A host's declared hardware, same shape as `specfleet facts` prints. Lets an organiser
# plan an event before the units are reachable; the facts play checks units against it.
EXPECTED_FACTS_VAR = policy_module.EXPECTED_FACTS_VAR


class InventoryError(ValueError):
    """An inventory Ansible cannot read (a missing path, a file that does not parse, a vaulted
    value without its password): one line naming it, for the CLIs to print."""


def host_variables(inventory_path: str | Sequence[str]) -> dict[str, dict[str, Any]]:
    """Variables of every host (group_vars and host_vars applied), by host name; one inventory
    source or several, as ``ansible-playbook -i A -i B`` reads them. Raises InventoryError when
    Ansible cannot read the inventory."""
    # Imported here: the rest of the CLI must not pay for loading Ansible.
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    _load_vault_secrets(loader)
    try:
        sources = [inventory_path] if isinstance(inventory_path, str) else list(inventory_path)
        inventory = InventoryManager(loader=loader, sources=sources)
        variables = VariableManager(loader=loader, inventory=inventory)
        hosts = sorted(inventory.get_hosts(), key=lambda host: host.name)
        return {
            host.name: _plain(variables.get_vars(host=host, include_hostvars=False))
            for host in hosts
        }
    except AnsibleError as exc:
        raise InventoryError(" ".join(str(exc).split())) from exc


def _load_vault_secrets(loader: Any) -> None:
    """Vaulted inventory values (a become password) decrypt with the vault password sources
    ansible.cfg names, as they do for ansible-playbook without flags. A relative source is
    taken from the configuration file's folder: this runs wherever its caller's working
    directory is (the fan-out driver runs in the playbook's). None configured, or none
    loadable: no secrets, and reading a vaulted value then fails as in Ansible."""
    from ansible import constants as C
    from ansible.cli import CLI
    from ansible.errors import AnsibleError

    base = Path(C.CONFIG_FILE).parent if C.CONFIG_FILE else Path.cwd()
    identities = [_anchored(slug, base) for slug in C.DEFAULT_VAULT_IDENTITY_LIST or []]
    password_files = [str(base / C.DEFAULT_VAULT_PASSWORD_FILE)] if C.DEFAULT_VAULT_PASSWORD_FILE else []
    if not (identities or password_files):
        return
    try:
        secrets = CLI.setup_vault_secrets(loader, vault_ids=identities, vault_password_files=password_files,
                                          ask_vault_pass=False, auto_prompt=False, initialize_context=False)
    except AnsibleError:
        return
    loader.set_vault_secrets(secrets)
    # A vaulted value inside a plain file (`ansible-vault encrypt_string`) decrypts when read,
    # from the process's vault context, which Ansible's own CLIs set up once per process.
    from ansible.parsing.vault import VaultSecretsContext

    if VaultSecretsContext.current(optional=True) is None:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))


def _anchored(vault_id: str, base: Path) -> str:
    """`label@source` with a relative file source made absolute under `base`."""
    label, at, source = vault_id.rpartition("@")
    if source in ("prompt", "prompt_ask_vault_pass") or Path(source).is_absolute():
        return vault_id
    return f"{label}{at}{base / source}"


def _plain(value: Any) -> Any:
    """Ansible wraps values in its own types; the plan wants plain Python data."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    return str(value)


def policy_overrides(variables: Mapping[str, Any]) -> dict[str, Any]:
    names = set(policy_module.variable_names())
    return {name: value for name, value in variables.items() if name in names}


class FactsFileError(ValueError):
    """A facts file that cannot be planned from; the message starts with its path."""


def read_facts_file(path: Path) -> dict[str, Any]:
    """A unit's facts from a file `specfleet facts` or the plan play wrote (Ansible's jsonfile
    fact cache stores all facts; ours sit under one key), checked as a declaration is."""
    try:
        data = loading.load_json(path, limit=loading.SMALL_FILE)
    except loading.FileProblem as exc:
        raise FactsFileError(str(exc)) from None
    data = data.get("specfleet_unit", data) if isinstance(data, dict) else data
    problems = policy_module.expected_facts_problems(data, name="facts")
    if problems:
        raise FactsFileError(f"{path}: not a unit's facts ({'; '.join(problems)}); "
                             "write them with `specfleet facts --root DIR` or playbooks/plan.yml")
    return data


def facts_for(host: str, variables: Mapping[str, Any], facts_dir: str | None) -> tuple[dict | None, str]:
    """(facts, where they came from) for one host; facts None when there are none."""
    if facts_dir:
        path = Path(facts_dir) / f"{host}.json"
        if path.exists():
            return read_facts_file(path), str(path)
    expected = variables.get(EXPECTED_FACTS_VAR)
    if isinstance(expected, Mapping):
        return dict(expected), f"{EXPECTED_FACTS_VAR} (inventory)"
    return None, ""
