"""specfleet.variables: one schema of specfleet_* names, public variable types, host names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specfleet import policy, variables
from tests.conftest import REPO

ROLES = REPO / "roles"


def names_the_collection_sets() -> set[str]:
    """Every specfleet_* name the collection's plays and plugins set for themselves: register,
    set_fact, play/block/task vars, role vars files, loop variables, and module facts."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "register" and isinstance(value, str):
                    found.add(value)
                elif key in ("set_fact", "ansible.builtin.set_fact", "vars") and isinstance(value, dict):
                    found.update(value)
                elif key == "loop_control" and isinstance(value, dict) and "loop_var" in value:
                    found.add(value["loop_var"])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    files = [path for path in [*(REPO / "playbooks").rglob("*.yml"), *ROLES.rglob("*.yml")]
             if "molecule" not in path.parts]
    for path in files:
        data = yaml.safe_load(path.read_text())
        if path.parent.name == "vars" and isinstance(data, dict):
            found.update(data)
        walk(data)
    for path in (REPO / "plugins").rglob("*.py"):
        found.update(re.findall(r'ansible_facts.{0,40}?"(specfleet_[a-z0-9_]+)"', path.read_text()))
    public_or_declared = set(policy.variable_names()) | variables.role_variable_names(ROLES) | set(variables.public())
    return {name for name in found if name.startswith("specfleet_")} - public_or_declared


def test_internal_names_are_exactly_what_the_collection_sets():
    declared = set(variables.schema()["internal"])
    actual = names_the_collection_sets()
    assert not actual - declared, f"add to data/variables.yml internal: {sorted(actual - declared)}"
    assert not declared - actual, f"no longer set by the collection, remove: {sorted(declared - actual)}"


def test_every_public_variable_has_a_known_type_and_a_description():
    types = {"secret", "env", "bool", "name", "path", "host", "count", "percent", "serial", "any"}
    for name, entry in variables.public().items():
        assert name.startswith("specfleet_") and entry["type"] in types and entry["description"], name
    overlap = set(variables.public()) & (set(policy.variable_names()) | variables.role_variable_names(ROLES))
    assert not overlap, f"declared twice: {sorted(overlap)}"


def known() -> set[str]:
    return variables.known_names(policy.variable_names(), ROLES)


@pytest.mark.parametrize(("name", "suggestion"), [
    ("specfleet_spec_token", "specfleet_spec_tokens"),
    ("specfleet_gate_min_tpot_dorp", "specfleet_gate_min_tpot_drop"),
    ("specfleet_hf_cache_stor", "specfleet_hf_cache_store"),
    ("specfleet_api_keys", "specfleet_api_key"),
])
def test_a_misspelt_name_is_refused_with_the_closest_known_one(name, suggestion):
    assert variables.unknown_problems([name], known()) == [
        f"{name}: not a specfleet variable; did you mean {suggestion}?"]


def test_known_foreign_and_lab_names_pass_and_a_far_name_gets_no_guess():
    assert variables.unknown_problems(
        ["specfleet_spec_tokens", "specfleet_plan", "ansible_host", "specfleet_lab_kind", "specfleet_docker_users"],
        known()) == []
    [problem] = variables.unknown_problems(["specfleet_zzzz_qqqq"], known())
    assert problem.startswith("specfleet_zzzz_qqqq: not a specfleet variable; see ")


def test_a_removed_name_says_what_took_its_place_not_a_look_alike():
    [problem] = variables.unknown_problems(["specfleet_rollout_max_fail_percentage"], known())
    assert problem.startswith("specfleet_rollout_max_fail_percentage: removed: every unit after the canaries")
    assert "did you mean" not in problem


def test_values_are_shown_cut_short():
    assert variables.shown("abc") == "'abc'"
    long = variables.shown("x" * 1_000_000)
    assert len(long) < 120 and long.endswith("(1000002 characters)")


@pytest.mark.parametrize(("values", "problem"), [
    ({"specfleet_api_key": ["a", "b"]}, "specfleet_api_key: must be a string (from Ansible Vault or the environment), "
                                        "got a list"),
    ({"specfleet_hf_token": {"t": 1}}, "specfleet_hf_token: must be a string (from Ansible Vault or the environment), "
                                       "got a map"),
    ({"specfleet_serve_extra_env": {"HF_TOKEN": "hf_x"}}, "specfleet_serve_extra_env.HF_TOKEN: looks like a secret"),
    ({"specfleet_serve_extra_env": {"OPENAI_API_KEY": "k"}}, "specfleet_serve_extra_env.OPENAI_API_KEY: looks like"),
    ({"specfleet_serve_extra_env": {"1BAD": "x"}}, "specfleet_serve_extra_env: '1BAD' is not an environment variable"),
    ({"specfleet_serve_extra_env": ["A=1"]}, "specfleet_serve_extra_env: must be a map of environment variable name"),
    ({"specfleet_run_id": "../../etc"}, "specfleet_run_id: must be a name of letters"),
    ({"specfleet_rollout_remeasure": "maybe"}, "specfleet_rollout_remeasure: must be true or false, got 'maybe'"),
    ({"specfleet_rollout_serial": [1, "0%"]}, "specfleet_rollout_serial: must be a count >= 1"),
    ({"specfleet_rollout_canary_max_fail_percentage": 150},
     "specfleet_rollout_canary_max_fail_percentage: must be a percentage"),
    ({"specfleet_bench_requests": -4}, "specfleet_bench_requests: must be an integer >= 0, got -4"),
    ({"specfleet_bench_max_tokens": 1}, "specfleet_bench_max_tokens: must be an integer >= 2, got 1"),
])
def test_public_variable_problems(values, problem):
    [found] = variables.public_problems(values)
    assert found.startswith(problem), found


def test_values_given_with_e_as_text_pass_as_ansible_reads_them():
    """`-e specfleet_rollout_remeasure=true` passes text; Ansible reads it as true."""
    assert variables.public_problems({
        "specfleet_rollout_remeasure": "true", "specfleet_rollout_serial": "5", "specfleet_bench_requests": "16",
        "specfleet_rollout_canary_max_fail_percentage": "50", "specfleet_bench_warmups": "0",
    }) == []
    assert variables.as_bool("no") is False and variables.as_bool("maybe") is None
    assert variables.as_integer("12") == 12 and variables.as_integer("1.5") is None


def test_secret_values_are_never_echoed():
    secret = "hf_SECRETVALUE123"
    found = variables.public_problems({"specfleet_hf_token": [secret], "specfleet_api_key": {"k": secret}})
    assert len(found) == 2 and not any(secret in problem for problem in found)


def test_good_public_values_pass():
    assert variables.public_problems({
        "specfleet_api_key": "k",
        "specfleet_serve_extra_env": {"VLLM_LOGGING_LEVEL": "DEBUG", "OMP_NUM_THREADS": 4},
        "specfleet_run_id": "20261126T080000Z", "specfleet_rollout_serial": [1, 3, "100%"],
        "specfleet_rollout_remeasure": True, "specfleet_bench_warmups": 0,
    }) == []


@pytest.mark.parametrize("host", ["thor-01", "192.168.1.10", "agx.lab.example", "unit_7"])
def test_usable_host_names(host):
    assert variables.host_name_problem(host) is None
    assert variables.unit_file(Path("/runs/x/units"), host, ".json") == Path(f"/runs/x/units/{host}.json")


@pytest.mark.parametrize("host", ["../../x", "a/b", "..", ".hidden", "-rf", "", "x" * 200, "a b"])
def test_host_names_that_would_leave_their_folder_are_refused(host):
    assert variables.host_name_problem(host).startswith("inventory_hostname: ")
    with pytest.raises(ValueError, match="not a usable unit name"):
        variables.unit_file(Path("/runs/x/units"), host, ".json")


@pytest.mark.parametrize("settings", [
    {}, {"ansible_host": "10.0.0.2", "ansible_port": 2222, "ansible_user": "nvidia"},
    {"ansible_host": "fe80::1%eth0"}, {"ansible_host": "::1"}, {"ansible_user": "jdoe@corp.example.com"},
    {"ansible_port": "22"},
    {"ansible_ssh_private_key_file": "~/.ssh/fleet key"}, {"specfleet_fanout_address": "unit-7.lan"},
])
def test_connection_settings_ssh_takes_as_given(settings):
    assert variables.connection_problems("thor-01", settings) == []


@pytest.mark.parametrize(("settings", "says"), [
    ({"ansible_host": "-oProxyCommand=x"}, "thor-01: ansible_host: '-oProxyCommand=x' is not a host name or address"),
    ({"ansible_ssh_host": "a b"}, "thor-01: ansible_ssh_host: 'a b' is not a host name or address"),
    ({"ansible_host": "[2001:db8::1]"}, "thor-01: ansible_host: '[2001:db8::1]' is not"),
    ({"ansible_host": "a\nHost *"}, "thor-01: ansible_host: "),
    ({"specfleet_fanout_address": ""}, "thor-01: specfleet_fanout_address: '' is not"),
    ({"ansible_port": "abc"}, "thor-01: ansible_port: must be a port number 1..65535, got 'abc'"),
    ({"ansible_port": 0}, "thor-01: ansible_port: must be a port number 1..65535, got 0"),
    ({"specfleet_fanout_port": True}, "thor-01: specfleet_fanout_port: must be a port number"),
    ({"ansible_user": "-l"}, "thor-01: ansible_user: '-l' is not a login name"),
    ({"ansible_ssh_private_key_file": "k\nx"}, "thor-01: ansible_ssh_private_key_file: must be a file path on one"),
])
def test_connection_settings_ssh_would_misread_name_host_and_variable(settings, says):
    (problem,) = variables.connection_problems("thor-01", settings)
    assert problem.startswith(says), problem


def test_a_templated_address_is_ansibles_to_resolve_where_ansible_connects():
    templated = {"ansible_host": "{{ inventory_hostname }}.lan", "ansible_port": "{{ port }}"}
    assert variables.connection_problems("thor-01", templated, templated_ok=True) == []
    assert len(variables.connection_problems("thor-01", templated)) == 2
    assert variables.connection_problems("-x", {})[0].startswith("inventory_hostname: '-x'")

    from ansible.parsing.vault import EncryptedString  # a `!vault` value status does not decrypt

    vaulted = EncryptedString(ciphertext="$ANSIBLE_VAULT;1.1;AES256\n00")
    assert variables.connection_problems("thor-01", {"ansible_user": vaulted}, templated_ok=True) == []
    assert variables.connection_problems("thor-01", {"ansible_user": vaulted})  # where it must be read
    assert variables.port_of({"ansible_port": "2222"}, "ansible_port") == 2222
    assert variables.port_of({}, "specfleet_fanout_port", default=2200) == 2200


@pytest.mark.parametrize(("name", "problem"), [
    ("SPECFLEET_SPEC_TOKENS", "variable names are case-sensitive; did you mean specfleet_spec_tokens?"),
    ("Specfleet_Spec_Token", "not a specfleet variable; did you mean specfleet_spec_tokens?"),
])
def test_a_specfleet_name_in_another_case_is_refused(name, problem):
    assert variables.unknown_problems([name], known()) == [f"{name}: {problem}"]


def test_two_hosts_reaching_one_unit_are_refused_and_other_hosts_are_not_blamed():
    destinations = {
        "thor-01": variables.destination_of("thor-01", {"ansible_host": "10.0.0.5"}),
        "thor-02": variables.destination_of("thor-02", {"ansible_ssh_host": "10.0.0.5", "ansible_port": "22"}),
        "THOR-03": variables.destination_of("THOR-03", {}),
        "thor-03": variables.destination_of("thor-03", {}),  # host names are matched as ssh does: any case
        "nano-01": variables.destination_of("nano-01", {"ansible_host": "10.0.0.5", "ansible_port": 2222}),
        "templated": variables.destination_of("templated", {"ansible_host": "{{ lookup('env', 'H') }}"}),
        "local": variables.destination_of("local", {"ansible_connection": "local", "ansible_host": "10.0.0.5"}),
    }
    assert destinations["templated"] is None and destinations["local"] is None
    assert variables.same_unit_problems(destinations) == [
        "hosts 'THOR-03', 'thor-03': the same unit (thor-03 port 22) listed twice; keep one host per unit",
        "hosts 'thor-01', 'thor-02': the same unit (10.0.0.5 port 22) listed twice; keep one host per unit",
    ]
    assert variables.same_unit_problems(destinations, involving="nano-01") == []
    assert len(variables.same_unit_problems(destinations, involving="thor-02")) == 1
