"""Bad input suite (issue 7): malformed inventories and variables fail before any unit is touched.

Every case writes a two-unit inventory whose hosts point at a closed port (SSH to
127.0.0.1:1), so a unit that WERE contacted would show up as UNREACHABLE. Each case runs
the real entry points, ansible-playbook with plan.yml (and some with site.yml or
rollout.yml) and, where planning reads the variable, `specfleet plan -i`, and checks that
the run fails, names the variable and the host, and that only the controller-side
preflight ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet import cli
from tests.conftest import REPO

THOR, NANO = "thor-01", "nano-01"
PREFLIGHT_TASK = "Validate specfleet policy variables"
# What may run before the preflight refuses: it and the inventory check, both on the controller.
CONTROLLER_TASKS = {"Check that the inventory names units", PREFLIGHT_TASK}

# What the inventories in inventory/ declare for these classes; the CLI plans from it.
EXPECTED = {
    THOR: {"device_class": "thor", "l4t": "38.2.0", "memory_mb": 125771, "cuda": "13.0"},
    NANO: {"device_class": "orin_nano", "l4t": "36.4.7", "memory_mb": 7441, "cuda": "12.6"},
}


@dataclass(frozen=True)
class Case:
    id: str
    variables: dict[str, Any]  # set on `host`, or on every host when host is None
    variable: str  # the variable the error must name (a problem line starts with it)
    message: str  # a fragment of the explanation
    host: str | None = THOR
    # Entry points besides plan.yml; the CLI only where planning reads the variable.
    playbooks: tuple[str, ...] = ()
    cli: bool = True
    expected_facts: Any = None  # replaces the host's declaration (any value: bad ones are the point)
    secret: str | None = None  # a secret value the case sets: it must appear nowhere in the output

    @property
    def hosts(self) -> list[str]:
        return [self.host] if self.host else [NANO, THOR]


def expect(host: str, **changes: Any) -> dict[str, Any]:
    return {**EXPECTED[host], **changes}


SECRET = "hf_SECRETvalue0123456789"  # a token-shaped value no output may repeat

# One case per row reads as the table it is.
# fmt: off
CASES = [
    # Device classes and token counts
    Case("class-key-unknown", {"specfleet_spec_tokens": {"xavier": 3}},
         "specfleet_spec_tokens", "unknown device class 'xavier'"),
    Case("tokens-zero", {"specfleet_spec_tokens": {"thor": 0}},
         "specfleet_spec_tokens.thor", "must be 1..16, got 0", playbooks=("site.yml",)),
    Case("tokens-negative", {"specfleet_spec_tokens": {"orin_nano": -2}},
         "specfleet_spec_tokens.orin_nano", "must be 1..16, got -2", host=NANO),
    Case("tokens-too-many", {"specfleet_spec_tokens": {"agx_orin": 50}},
         "specfleet_spec_tokens.agx_orin", "must be 1..16, got 50"),
    Case("tokens-fractional", {"specfleet_spec_tokens": {"thor": 2.5}},
         "specfleet_spec_tokens.thor", "must be an integer, got 2.5"),
    Case("sweep-not-a-list", {"specfleet_spec_tokens_sweep": {"thor": 3}},
         "specfleet_spec_tokens_sweep.thor", "must be a list of integers, got 3"),
    Case("sweep-out-of-range", {"specfleet_spec_tokens_sweep": {"agx_orin": [2, 40]}},
         "specfleet_spec_tokens_sweep.agx_orin", "each must be 1..16, got [2, 40]", playbooks=("rollout.yml",)),
    Case("tokens-quoted", {"specfleet_spec_tokens": {"thor": "5"}},
         "specfleet_spec_tokens.thor", "must be an integer, got '5'"),
    Case("tokens-not-a-map", {"specfleet_spec_tokens": 5},
         "specfleet_spec_tokens", "must be a map of device class -> value"),
    # Methods
    Case("method-unknown", {"specfleet_spec_methods": ["eagle3", "medusa"]},
         "specfleet_spec_methods", "unknown method 'medusa'"),
    Case("methods-string-not-list", {"specfleet_spec_methods": "eagle3"},
         "specfleet_spec_methods", "must be a non-empty list, got 'eagle3'"),
    Case("methods-empty", {"specfleet_spec_methods": []},
         "specfleet_spec_methods", "must be a non-empty list"),
    Case("method-denied-unknown", {"specfleet_spec_methods_denied": {"thor": {"medusa": "why"}}},
         "specfleet_spec_methods_denied.thor", "unknown method 'medusa'"),
    Case("method-only-allowed-is-denied", {"specfleet_spec_methods": ["eagle3"]},
         "specfleet_spec_methods", "is denied on orin_nano", host=NANO, playbooks=("rollout.yml",)),
    # Memory
    Case("gpu-util-above-one", {"specfleet_gpu_memory_utilization": {"thor": 1.2}},
         "specfleet_gpu_memory_utilization.thor", "must be within 0 < x <= 1, got 1.2"),
    Case("gpu-util-zero", {"specfleet_gpu_memory_utilization": {"orin_nano": 0}},
         "specfleet_gpu_memory_utilization.orin_nano", "must be within 0 < x <= 1, got 0", host=NANO),
    Case("gpu-util-eaten-by-drop", {"specfleet_gpu_memory_utilization": {"thor": 0.04}},
         "specfleet_spec_memory_drop", "leaves no memory on thor"),
    Case("kv-cache-negative", {"specfleet_min_kv_cache_gib": -1},
         "specfleet_min_kv_cache_gib", "must be a number >= 0"),
    Case("context-not-a-number", {"specfleet_max_model_len": {"thor": "long"}},
         "specfleet_max_model_len.thor", "must be an integer >= 128"),
    Case("concurrency-below-bench", {"specfleet_max_num_seqs": 4},
         "specfleet_max_num_seqs", "must be an integer >= 8"),
    # Gate thresholds
    Case("gate-gain-negative", {"specfleet_gate_min_throughput_gain": -0.1},
         "specfleet_gate_min_throughput_gain", "must be a share 0..10"),
    Case("gate-tpot-above-one", {"specfleet_gate_min_tpot_drop": 1.5},
         "specfleet_gate_min_tpot_drop", "must be a share 0 <= x < 1", host=None),
    Case("gate-margin-wrong-type", {"specfleet_gate_margin": "none"},
         "specfleet_gate_margin", "must be a share 0 <= x < 1 (0.03 = 3%), got 'none'"),
    Case("gate-blocks-even", {"specfleet_gate_max_blocks": 4},
         "specfleet_gate_max_blocks", "must be an odd integer >= 3"),
    Case("gate-floor-above-gain", {"specfleet_gate_disable_below": 0.5},
         "specfleet_gate_disable_below", "the gate could never keep speculation"),
    Case("gate-workload-unknown", {"specfleet_gate_workloads": ["poetry"]},
         "specfleet_gate_workloads", "unknown workload 'poetry'"),
    # Model, precision, serving
    Case("model-unknown", {"specfleet_model": "meta-llama/Llama-9-400B"},
         "specfleet_model", "unknown model 'meta-llama/Llama-9-400B'", playbooks=("site.yml", "rollout.yml")),
    Case("model-wrong-type", {"specfleet_model": ["a", "b"]},
         "specfleet_model", "must be a model name or repo id"),
    Case("capability-check-not-bool", {"specfleet_capability_check": "yes"},
         "specfleet_capability_check", "must be true or false"),
    Case("batch-table-not-bool", {"specfleet_spec_batch_table": "on"},
         "specfleet_spec_batch_table", "must be true or false"),
    Case("port-out-of-range", {"specfleet_port": 70000},
         "specfleet_port", "must be a TCP port 1..65535, got 70000"),
    Case("port-zero", {"specfleet_port": 0},
         "specfleet_port", "must be a TCP port 1..65535, got 0", host=NANO),
    Case("seed-not-integer", {"specfleet_seed": "abc"},
         "specfleet_seed", "must be an integer, got 'abc'"),
    Case("mirror-with-scheme", {"specfleet_image_mirror": "http://registry.lan:5000"},
         "specfleet_image_mirror", "without scheme or path"),
    Case("mirror-trailing-slash", {"specfleet_image_mirror": "registry.lan:5000/"},
         "specfleet_image_mirror", "without scheme or path"),
    # Conflicting n-gram window
    Case("ngram-min-above-max", {"specfleet_ngram_prompt_lookup_min": 6, "specfleet_ngram_prompt_lookup_max": 4},
         "specfleet_ngram_prompt_lookup_min", "must not exceed specfleet_ngram_prompt_lookup_max"),
    Case("ngram-min-zero", {"specfleet_ngram_prompt_lookup_min": 0},
         "specfleet_ngram_prompt_lookup_min", "must be a positive integer, got 0"),
    # Declared facts (plan before the units are reachable)
    Case("expected-class-unknown", {}, "specfleet_expected_facts.device_class", "unknown device class 'xavier'",
         expected_facts=expect(THOR, device_class="xavier"), playbooks=("site.yml",)),
    Case("expected-l4t-unquoted", {}, "specfleet_expected_facts.l4t", "must be an L4T release like '36.4.3'",
         expected_facts=expect(THOR, l4t=38.2)),
    Case("expected-l4t-malformed", {}, "specfleet_expected_facts.l4t", "got 'r36.4'", host=NANO,
         expected_facts=expect(NANO, l4t="r36.4")),
    Case("expected-cuda-unquoted", {}, "specfleet_expected_facts.cuda", "must be a CUDA version like '12.6'",
         expected_facts=expect(THOR, cuda=13.0)),
    Case("expected-memory-missing", {}, "specfleet_expected_facts.memory_mb", "missing",
         expected_facts={k: v for k, v in EXPECTED[THOR].items() if k != "memory_mb"}),
    Case("expected-not-a-map", {}, "specfleet_expected_facts", "must be a map of facts",
         expected_facts="thor"),
    # Prepare roles' variables, checked against their meta/argument_specs.yml. The plan
    # does not read them, so `specfleet plan` has nothing to say about them.
    Case("role-int-wrong-type", {"specfleet_hf_cache_min_free_bytes": "lots"},
         "specfleet_hf_cache_min_free_bytes", "unable to convert to int", cli=False, playbooks=("site.yml",)),
    Case("role-bool-wrong-type", {"specfleet_docker_gpu_smoke_test": "maybe"},
         "specfleet_docker_gpu_smoke_test", "unable to convert to bool", cli=False),
    Case("role-choice-unknown", {"specfleet_image_source": "s3"},
         "specfleet_image_source", "must be one of: registry, tarball, got: s3", cli=False),
    Case("role-dict-not-list", {"specfleet_docker_users": {"nvidia": True}},
         "specfleet_docker_users", "unable to convert to list", cli=False),
    Case("role-nested-missing-key", {"specfleet_tiktoken_encodings": [{"name": "o200k_base"}]},
         "specfleet_tiktoken_encodings", "missing required arguments: sha256", cli=False),
    Case("role-store-missing", {"specfleet_hf_cache_store": "/nonexistent/hf-store"},
         "specfleet_hf_cache_store", "/nonexistent/hf-store is not a directory on the controller",
         cli=False, playbooks=("site.yml",)),
    Case("role-image-without-tag", {"specfleet_docker_gpu_smoke_image": "nvcr.io/nvidia/l4t-base"},
         "specfleet_docker_gpu_smoke_image", "has no tag or digest", cli=False),
    Case("role-smoke-test-without-image", {"specfleet_docker_gpu_smoke_test": True},
         "specfleet_docker_gpu_smoke_test", "specfleet_docker_gpu_smoke_image is empty", cli=False),
    # Misspelt names (issue 19): refused with the closest known name, never silently ignored
    Case("name-misspelt-policy", {"specfleet_spec_token": {"thor": 2}},
         "specfleet_spec_token", "not a specfleet variable; did you mean specfleet_spec_tokens?"),
    Case("name-misspelt-gate", {"specfleet_gate_min_tpot_dorp": 0.1},
         "specfleet_gate_min_tpot_dorp", "did you mean specfleet_gate_min_tpot_drop?", playbooks=("site.yml",)),
    Case("name-misspelt-role", {"specfleet_hf_cache_stor": "/srv/hf"},
         "specfleet_hf_cache_stor", "did you mean specfleet_hf_cache_store?"),
    Case("name-misspelt-secret", {"specfleet_api_keys": "k"},
         "specfleet_api_keys", "did you mean specfleet_api_key?", host=None),
    Case("name-case-upper", {"SPECFLEET_SPEC_TOKENS": {"thor": 2}},
         "SPECFLEET_SPEC_TOKENS", "variable names are case-sensitive; did you mean specfleet_spec_tokens?"),
    Case("name-case-misspelt", {"Specfleet_Spec_Token": {"thor": 2}},
         "Specfleet_Spec_Token", "not a specfleet variable; did you mean specfleet_spec_tokens?", host=None),
    Case("name-unknown", {"specfleet_frobnicate": True},
         "specfleet_frobnicate", "not a specfleet variable; see specfleet/data/policy.yml"),
    # Extra serve arguments: every spelling vLLM reads is one flag to the guard
    Case("extra-args-not-a-list", {"specfleet_serve_extra_args": "--enforce-eager"},
         "specfleet_serve_extra_args", "must be a list of non-empty strings"),
    Case("extra-args-plan-owned", {"specfleet_serve_extra_args": ["--port", "9000"]},
         "specfleet_serve_extra_args", "--port is set by the plan"),
    Case("extra-args-underscore-spec", {"specfleet_serve_extra_args": ["--speculative_config", '{"method": "ngram"}']},
         "specfleet_serve_extra_args", "--speculative-config is set by the plan", playbooks=("rollout.yml",)),
    Case("extra-args-underscore-equals", {"specfleet_serve_extra_args": ["--gpu_memory_utilization=0.99"]},
         "specfleet_serve_extra_args", "--gpu-memory-utilization is set by the plan"),
    Case("extra-args-short-alias", {"specfleet_serve_extra_args": ["-sc", '{"method": "ngram"}']},
         "specfleet_serve_extra_args", "--speculative-config is set by the plan"),
    Case("extra-args-underscore-seqs", {"specfleet_serve_extra_args": ["--max_num_seqs", "4"]},
         "specfleet_serve_extra_args", "--max-num-seqs is set by the plan", host=NANO),
    Case("extra-args-bad-json", {"specfleet_serve_extra_args": ["--compilation-config", "{bad"]},
         "specfleet_serve_extra_args", "--compilation-config takes JSON"),
    Case("extra-args-api-key", {"specfleet_serve_extra_args": ["--api-key", "sk-123"]},
         "specfleet_serve_extra_args", "--api-key carries a secret", playbooks=("site.yml",)),
    Case("extra-args-secret-in-a-bad-list", {"specfleet_serve_extra_args": ["--api-key", SECRET, ""]},
         "specfleet_serve_extra_args", "--api-key carries a secret", secret=SECRET),
    Case("extra-args-hf-token", {"specfleet_serve_extra_args": ["--hf_token=hf_abc"]},
         "specfleet_serve_extra_args", "--hf-token carries a secret"),
    # Environment and secrets
    Case("env-secret-name", {"specfleet_serve_extra_env": {"HF_TOKEN": "hf_x"}},
         "specfleet_serve_extra_env.HF_TOKEN", "looks like a secret; set it in specfleet_serve_secret_env", cli=False),
    Case("env-not-a-map", {"specfleet_serve_extra_env": ["A=1"]},
         "specfleet_serve_extra_env", "must be a map of environment variable name", cli=False),
    Case("env-bad-name", {"specfleet_serve_extra_env": {"1X": "y"}},
         "specfleet_serve_extra_env", "'1X' is not an environment variable name", cli=False),
    Case("secret-api-key-list", {"specfleet_api_key": [SECRET]},
         "specfleet_api_key", "must be a string (from Ansible Vault or the environment), got a list",
         cli=False, secret=SECRET, playbooks=("site.yml",)),
    Case("secret-hf-token-map", {"specfleet_hf_token": {"token": SECRET}},
         "specfleet_hf_token", "must be a string (from Ansible Vault or the environment), got a map",
         cli=False, secret=SECRET),
    Case("secret-role-api-key-list", {"specfleet_serve_api_key": [SECRET]},
         "specfleet_serve_api_key", "must be a string (from Ansible Vault or the environment), got a list",
         cli=False, secret=SECRET),
    Case("secret-env-not-text", {"specfleet_serve_secret_env": {"MY_TOKEN": [SECRET]}},
         "specfleet_serve_secret_env.MY_TOKEN", "must be a string", cli=False, secret=SECRET),
    # Run-level variables
    Case("run-id-a-path", {"specfleet_run_id": "../../etc"},
         "specfleet_run_id", "must be a name of letters, digits", cli=False, host=None, playbooks=("site.yml",)),
    Case("remeasure-not-bool", {"specfleet_rollout_remeasure": "maybe"},
         "specfleet_rollout_remeasure", "must be true or false, got 'maybe'", cli=False),
    Case("serial-zero", {"specfleet_rollout_serial": [0, "100%"]},
         "specfleet_rollout_serial", "must be a count >= 1, a percentage", cli=False, host=None),
    Case("max-fail-above-100", {"specfleet_rollout_canary_max_fail_percentage": 200},
         "specfleet_rollout_canary_max_fail_percentage", "must be a percentage 0..100", cli=False, host=None),
    Case("bench-requests-negative", {"specfleet_bench_requests": -1},
         "specfleet_bench_requests", "must be an integer >= 0, got -1", cli=False),
    Case("bench-max-tokens-one", {"specfleet_bench_max_tokens": 1},
         "specfleet_bench_max_tokens", "must be an integer >= 2, got 1", cli=False),
    Case("huge-value-cut-short", {"specfleet_model": "x" * 1_000_000},
         "specfleet_model", "(1000002 characters)"),
    # More of the policy
    Case("images-not-a-list", {"specfleet_images": {"name": "x"}},
         "specfleet_images", "must be a list of image entries"),
    Case("image-ref-without-tag", {"specfleet_images": [{
        "name": "mine", "ref": "registry.lan/vllm", "classes": ["thor"], "methods": ["eagle3"], "cuda": "13.0",
        "l4t_min": "38.2.0", "source": "ours"}]},
         "specfleet_images[0].ref", "must be registry/repository:tag"),
    Case("image-pin-unknown", {"specfleet_image": "no-such-image"},
         "specfleet_image", "must be an image name from images.yml or specfleet_images"),
    Case("event-model-unknown", {"specfleet_event_models": ["nobody/none-1B"]},
         "specfleet_event_models", "unknown model(s) 'nobody/none-1B'"),
    Case("tokens-by-method-zero", {"specfleet_spec_tokens_by_method": {"thor": {"eagle3": 0}}},
         "specfleet_spec_tokens_by_method.thor.eagle3", "must be an integer 1..16, got 0"),
    Case("trial-port-is-the-serving-port", {"specfleet_trial_port": 8000},
         "specfleet_trial_port", "must be a TCP port 1..65535 other than specfleet_port, or null"),
    Case("oom-retry-drop-one", {"specfleet_oom_retry_memory_drop": 1},
         "specfleet_oom_retry_memory_drop", "must be a share 0 <= x < 1 (0 = no retry)"),
    Case("gate-confidence-low", {"specfleet_gate_confidence": 0.3},
         "specfleet_gate_confidence", "must be a probability 0.5 < x < 1"),
    Case("gate-drift-above-one", {"specfleet_gate_max_drift": 2},
         "specfleet_gate_max_drift", "must be a share 0 <= x < 1"),
    Case("gate-tie-gap-negative", {"specfleet_gate_tie_logprob_gap": -1},
         "specfleet_gate_tie_logprob_gap", "must be a number of nats >= 0"),
    Case("trtllm-batch-zero", {"specfleet_trtllm_max_batch_size": 0},
         "specfleet_trtllm_max_batch_size", "must be a positive integer or null, got 0"),
]
# fmt: on


UNIT_ADDRESSES = ("127.0.0.1", "127.0.0.2")


def write_inventory(directory: Path, case: Case) -> Path:
    """Two units behind a closed port: contacting one would print UNREACHABLE. Two loopback
    addresses: one address and port for both would be one unit listed twice."""
    hosts: dict[str, dict[str, Any]] = {
        host: {"ansible_host": address, "specfleet_expected_facts": dict(facts)}
        for (host, facts), address in zip(EXPECTED.items(), UNIT_ADDRESSES, strict=True)
    }
    group_vars: dict[str, Any] = {"ansible_connection": "ssh", "ansible_port": 1}
    if case.host is None:
        group_vars.update(case.variables)
    else:
        hosts[case.host].update(case.variables)
    if case.expected_facts is not None:
        hosts[case.host or THOR]["specfleet_expected_facts"] = case.expected_facts
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": group_vars, "hosts": hosts}}, sort_keys=False))
    return path


def run(command: list[str], runs_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # SPECFLEET_RUNS_DIR: the summary callback must not pick up someone else's rollout run.
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "SPECFLEET_RUNS_DIR": str(runs_dir),
           **(env or {})}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def problem_line(variable: str, message: str) -> str:
    """A problem as policy.py and role_args.py word it: VARIABLE[.key]: ... message ..."""
    return rf"{re.escape(variable)}: .*{re.escape(message)}"


PLAYBOOK_RUNS = [
    pytest.param(case, playbook, id=f"{case.id}-{playbook.removesuffix('.yml')}")
    for case in CASES
    for playbook in ("plan.yml", *case.playbooks)
]


@pytest.mark.parametrize(("case", "playbook"), PLAYBOOK_RUNS)
def test_playbook_refuses_before_touching_a_unit(case: Case, playbook: str, tmp_path: Path):
    inventory = write_inventory(tmp_path, case)
    binary = Path(sys.executable).with_name("ansible-playbook")
    result = run([str(binary), "-i", str(inventory), f"playbooks/{playbook}"], tmp_path / "runs")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    for host in case.hosts:
        # The preflight prints one "  - HOST: VARIABLE: ..." line per problem.
        assert re.search(rf"- {re.escape(host)}: " + problem_line(case.variable, case.message), out), out
    # Nothing but the controller-side checks ran: no unit was contacted, let alone changed.
    assert set(re.findall(r"^TASK \[(.+?)\]", out, re.MULTILINE)) == CONTROLLER_TASKS, out
    assert "UNREACHABLE" not in out and "Gathering Facts" not in out, out
    assert set(re.findall(r"unreachable=(\d+)", out)) == {"0"}, out
    assert "Traceback" not in out, out
    assert len(out) < 60_000, f"{len(out)} characters of output: a value echoed whole?"
    if case.secret:
        assert case.secret not in out


CLI_RUNS = [pytest.param(case, id=case.id) for case in CASES if case.cli]


@pytest.mark.parametrize("case", CLI_RUNS)
def test_cli_plan_exits_2_naming_variable_and_host(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture):
    inventory = write_inventory(tmp_path, case)
    # In process: the same main() the `specfleet` script calls, without paying ~1 s of
    # interpreter and Ansible start-up per case (tests/unit/specfleet/test_cli.py runs the script).
    code = cli.main(["plan", "-i", str(inventory)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_BAD_INPUT, out + err
    assert out == "", "nothing may be planned"
    assert len(err) < 20_000 and (case.secret is None or case.secret not in err)
    # One line per distinct problem, "VARIABLE: ... [host: h1, h2]".
    hosts = ", ".join(sorted(case.hosts))
    assert re.search(problem_line(case.variable, case.message) + rf".*\[host: {re.escape(hosts)}\]", err), err


def test_control_a_valid_inventory_does_reach_the_units(tmp_path: Path):
    """The harness can see contact: the same inventory without the bad input gets past the
    preflight and its units come out UNREACHABLE (else every case above would prove nothing)."""
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    binary = Path(sys.executable).with_name("ansible-playbook")
    result = run([str(binary), "-i", str(inventory), "playbooks/plan.yml"], tmp_path / "runs")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "Read the unit's identity" in out and "UNREACHABLE" in out, out


def test_every_category_of_issues_7_and_19_has_cases():
    ids = {case.id for case in CASES}
    assert len(ids) == len(CASES) >= 80
    for prefix in (
        "name-misspelt-",
        "name-case-",
        "extra-args-underscore-",
        "extra-args-api-key",
        "env-secret-name",
        "secret-",
        "run-id-",
        "huge-value",
        "class-",
        "tokens-",
        "gate-",
        "gpu-util-",
        "model-unknown",
        "mirror-",
        "expected-",
        "role-",
        "role-store-missing",
        "ngram-min-above-max",
        "method-only-allowed-is-denied",
    ):
        assert any(case_id.startswith(prefix) for case_id in ids), prefix


@pytest.mark.parametrize("extra", ["SPECFLEET_SPEC_TOKENS={'thor': 2}", "specfleet_spec_token={'thor': 2}"])
def test_an_extra_variable_in_another_case_or_misspelt_is_refused_before_any_unit(extra: str, tmp_path: Path):
    """-e values reach every host: the preflight reads them as it reads the inventory's."""
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    binary = Path(sys.executable).with_name("ansible-playbook")
    result = run([str(binary), "-i", str(inventory), "-e", extra, "playbooks/site.yml"], tmp_path / "runs")
    out = result.stdout + result.stderr
    name = extra.split("=", 1)[0]
    assert result.returncode != 0, out
    for host in (THOR, NANO):
        assert re.search(rf"- {host}: {name}: .*did you mean specfleet_spec_tokens\?", out), out
    assert set(re.findall(r"^TASK \[(.+?)\]", out, re.MULTILINE)) == CONTROLLER_TASKS, out
    assert "UNREACHABLE" not in out and "Traceback" not in out, out


def listed_twice(directory: Path, second: dict[str, Any]) -> Path:
    """THOR, and NANO with ``second``'s connection settings over a copy of THOR's."""
    inventory = write_inventory(directory, Case("valid", {}, "", ""))
    content = yaml.safe_load(inventory.read_text())
    hosts = content["all"]["hosts"]
    hosts[NANO].update({"ansible_host": hosts[THOR]["ansible_host"], **second})
    inventory.write_text(yaml.safe_dump(content, sort_keys=False))
    return inventory


@pytest.mark.parametrize("second", [{}, {"ansible_host": "127.0.0.1", "ansible_ssh_port": 1}, {"ansible_port": "1"}],
                         ids=["same-address", "aliases", "port-as-text"])
def test_one_unit_listed_twice_is_refused_before_any_unit(second: dict[str, Any], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture):
    inventory = listed_twice(tmp_path, second)
    code, out = ansible_playbook(inventory, "site.yml", tmp_path / "runs")
    assert code != 0, out
    for host in (THOR, NANO):
        assert re.search(rf"- {host}: hosts '{NANO}', '{THOR}': the same unit \(127.0.0.1 port 1\) listed twice",
                         out), out
    assert set(re.findall(r"^TASK \[(.+?)\]", out, re.MULTILINE)) == CONTROLLER_TASKS, out
    assert "UNREACHABLE" not in out and "Traceback" not in out, out
    assert cli.main(["plan", "-i", str(inventory)]) == cli.EXIT_BAD_INPUT
    assert "the same unit (127.0.0.1 port 1) listed twice" in capsys.readouterr().err
    for command in CONNECTING_COMMANDS:
        result = run([sys.executable, "-m", "specfleet.cli", command, "-i", str(inventory),
                      *CONNECTING_ARGS[command](tmp_path)], tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "the same unit (127.0.0.1 port 1) listed twice" in result.stderr.strip().splitlines()[-1]


def test_a_host_written_twice_in_one_yaml_map_is_refused(tmp_path: Path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    {THOR}:\n      ansible_host: 127.0.0.1\n"
                         f"    {THOR}:\n      ansible_host: 127.0.0.2\n")
    code, out = ansible_playbook(inventory, "plan.yml", tmp_path / "runs")
    assert code != 0 and "Found duplicate mapping key" in out and "UNREACHABLE" not in out, out


# ---- issue 19: inputs that are not a variable of a unit -------------------------------------

def ansible_playbook(inventory: Path, playbook: str, runs: Path) -> tuple[int, str]:
    binary = Path(sys.executable).with_name("ansible-playbook")
    result = run([str(binary), "-i", str(inventory), f"playbooks/{playbook}"], runs)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("playbook", ["plan.yml", "site.yml"])
def test_an_empty_inventory_fails_instead_of_doing_nothing(playbook: str, tmp_path: Path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts: {}\n")
    code, out = ansible_playbook(inventory, playbook, tmp_path / "runs")
    assert code != 0, out
    assert f"the inventory ({inventory}) names no hosts" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("host", ["../../escape", "units/thor-01"])
def test_a_host_name_that_is_a_path_is_refused_before_any_unit(host: str, tmp_path: Path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
        "hosts": {host: {"specfleet_expected_facts": EXPECTED[THOR]}}}}))
    code, out = ansible_playbook(inventory, "site.yml", tmp_path / "runs")
    assert code != 0, out
    assert re.search(rf"- {re.escape(host)}: inventory_hostname: '{re.escape(host)}' is not a usable unit name", out)
    assert set(re.findall(r"^TASK \[(.+?)\]", out, re.MULTILINE)) == CONTROLLER_TASKS, out
    assert not (tmp_path / "escape").exists() and not list(tmp_path.glob("**/escape.json"))
    assert cli.main(["plan", "-i", str(inventory)]) == cli.EXIT_BAD_INPUT


def facts_file(directory: Path, name: str, content: str) -> Path:
    path = directory / name
    path.write_bytes(content.encode("utf-8", "surrogateescape"))  # lone surrogates: raw bytes
    return path


FACTS = json.dumps({"specfleet_unit": {**EXPECTED[THOR], "host": "thor-01"}})


@pytest.mark.parametrize(("content", "message"), [
    (FACTS[: len(FACTS) // 2], "not JSON"),
    ("\udcff\udcfe" + FACTS, "not UTF-8 text"),
    ("[" * 100_000 + "]" * 100_000, "nested more than 64 deep"),
    (FACTS + " " * (2 << 20), "larger than 1024 KiB"),
    (json.dumps({"specfleet_unit": {"device_class": "thor", "memory_mb": 125771}}), "facts.l4t: missing"),
    (json.dumps({"device_class": "thor", "l4t": "38.2.0", "memory_mb": "lots"}),
     "facts.memory_mb: must be a positive integer"),
    (json.dumps(["thor"]), "not a map: a list"),
    (json.dumps({"specfleet_unit": {**EXPECTED[THOR], "host": "../x"}}), "'../x' is not a usable unit name"),
], ids=["truncated", "binary", "deep", "huge", "l4t-missing", "memory-not-a-number", "not-a-map", "host-a-path"])
def test_cli_refuses_a_bad_facts_file_naming_it(content: str, message: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture):
    path = facts_file(tmp_path, "unit.json", content)
    assert cli.main(["plan", "--facts", str(path)]) == cli.EXIT_BAD_INPUT
    _, err = capsys.readouterr()
    assert f"--facts {path}" in err and message in err and "Traceback" not in err, err


def test_cli_refuses_a_truncated_facts_dir_file_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    facts_dir = tmp_path / "facts"
    facts_dir.mkdir()
    path = facts_file(facts_dir, "thor-01.json", FACTS[:40])
    assert cli.main(["plan", "-i", str(inventory), "--facts-dir", str(facts_dir)]) == cli.EXIT_BAD_INPUT
    _, err = capsys.readouterr()
    assert f"--facts-dir {path}: not JSON" in err, err


# Every command that reads an inventory, given one Ansible cannot use: exit 2, the path named, no
# traceback (run as a user runs them, from the checkout, whose ansible.cfg fails unparsed sources).
INVENTORY_COMMANDS = {
    "plan": ["plan"], "status": ["status"], "hostkeys": ["hostkeys"], "store-tiktoken": ["store", "tiktoken"],
}
BAD_INVENTORIES = {
    "missing": None,
    "not-yaml": "all: [hosts: {thor-01\n",
    "no-hosts": "all:\n  vars:\n    ansible_user: nvidia\n",
}


@pytest.mark.parametrize("inventory_kind", BAD_INVENTORIES)
@pytest.mark.parametrize("command", INVENTORY_COMMANDS)
def test_every_inventory_reading_command_refuses_an_unusable_inventory_naming_it(
        command: str, inventory_kind: str, tmp_path: Path):
    inventory = tmp_path / "event" / "inventory.yml"
    content = BAD_INVENTORIES[inventory_kind]
    if content is not None:
        inventory.parent.mkdir()
        inventory.write_text(content)
    result = run([sys.executable, "-m", "specfleet.cli", *INVENTORY_COMMANDS[command], "-i", str(inventory),
                  # A closed loopback port: were the inventory taken, nothing would go further.
                  *(["--dir", str(tmp_path / "tiktoken"), "--url-prefix", "http://127.0.0.1:9/"]
                    if command == "store-tiktoken" else [])], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    complaint = result.stderr.strip().splitlines()[-1]
    assert str(inventory) in complaint and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "tiktoken").exists() or not any((tmp_path / "tiktoken").iterdir())


def test_cli_policy_file_names_the_misspelt_variable_and_the_right_one(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    policy = tmp_path / "policy.yml"
    policy.write_text("specfleet_gate_min_tpot_dorp: 0.1\n")
    assert cli.main(["plan", "-i", str(inventory), "--policy", str(policy)]) == cli.EXIT_BAD_INPUT
    _, err = capsys.readouterr()
    assert f"--policy {policy}: not policy variables: specfleet_gate_min_tpot_dorp; did you mean " \
           "specfleet_gate_min_tpot_drop?" in err, err


def laughs(levels: int) -> str:
    """A 'billion laughs': each level an anchored list of nine aliases of the one before."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "\n".join([*lines, f"specfleet_spec_tokens: *l{levels - 1}", ""])


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "not UTF-8 text (a binary file?)"),
    (("a: " + "[" * 100_000 + "]" * 100_000 + "\n").encode(), "nested more than 64 deep"),
    (laughs(9).encode(), "more than 200000 values once its aliases (*name) are expanded"),
    (b"x: &x [*x]\n", "more than 200000 values once its aliases"),
    (b"specfleet_spec_tokens: {thor: 2}\n" + b"# padding\n" * 200_000, "larger than 1024 KiB"),
    (b"- specfleet_spec_tokens\n", "not a map or null: a list"),
    (b"specfleet_spec_tokens: [\n", "not YAML (while parsing a flow node"),
], ids=["binary", "deep", "billion-laughs", "recursive-alias", "huge", "a-list", "truncated"])
def test_cli_policy_file_that_is_no_policy_is_one_line_naming_it(content: bytes, message: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    policy = tmp_path / "policy.yml"
    policy.write_bytes(content)
    assert cli.main(["plan", "-i", str(inventory), "--policy", str(policy)]) == cli.EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"specfleet plan: --policy {policy}: {message}"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(("data_file", "edit", "message"), [
    ("catalog.yml", lambda d: d["models"][0].update(vocab_size="big"), "catalog.yml models[0].vocab_size: must be an"),
    ("catalog.yml", lambda d: d["models"][1].pop("repo"), "catalog.yml models[1]: missing repo"),
    ("catalog.yml", lambda d: d["heads"][0].update(weight_gib=1), "catalog.yml heads[0]: unknown field(s) weight_gib"),
    ("images.yml", lambda d: d["images"][0].update(ref="nvcr.io/nvidia/vllm"), "images.yml images[0].ref: must be"),
    ("device_classes.yml", lambda d: d["device_classes"]["thor"].update(compute_capability="11.0"),
     "device_classes.yml device_classes.thor.compute_capability: must be an integer"),
    ("device_classes.yml", lambda d: d["device_classes"]["orin_nx"]["policy"].pop("specfleet_max_model_len"),
     "device_classes.yml device_classes.orin_nx.policy: missing specfleet_max_model_len"),
    ("device_classes.yml", lambda d: d["device_classes"]["thor"].update(memory_gib=[128, 32]),
     "device_classes.yml device_classes.thor.memory_gib: must be [low, high]"),
    ("capability.yml", lambda d: d["formats"].update(fp8="fast"), "capability.yml formats.fp8: must be a map"),
], ids=["model-field-type", "model-field-missing", "head-field-unknown", "image-ref", "class-capability",
        "class-policy-missing", "class-memory-reversed", "format-not-a-map"])
def test_a_data_file_edited_badly_is_an_error_naming_file_entry_and_field(
        data_file, edit, message, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    from importlib import resources

    from specfleet import capability, catalog

    data = tmp_path / "data"
    shutil.copytree(resources.files("specfleet.data"), data)
    content = yaml.safe_load((data / data_file).read_text())
    edit(content)
    (data / data_file).write_text(yaml.safe_dump(content))
    monkeypatch.setattr(catalog.resources, "files", lambda package: data)
    loaders = (catalog.load_catalog, catalog.load_device_classes, capability.load_table)
    for loader in loaders:
        loader.cache_clear()
    try:
        inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
        assert cli.main(["plan", "-i", str(inventory)]) == cli.EXIT_BAD_INPUT
    finally:
        for loader in loaders:
            loader.cache_clear()
    _, err = capsys.readouterr()
    assert f"specfleet/data/{message}" in err and "Traceback" not in err, err


# Connection settings ssh would read as options: every command that connects (or hands the
# inventory to Ansible) refuses them before it runs ssh, naming the host and the variable.
CONNECTING_COMMANDS = ("distribute", "hostkeys", "status")


def distribute_args(directory: Path) -> list[str]:
    store = directory / "store"
    (store / "manifests").mkdir(parents=True, exist_ok=True)
    (store / "manifests" / "entry.json").write_text(json.dumps({"name": "entry", "id": "x", "files": {}}))
    return ["--store", str(store), "--name", "entry"]


CONNECTING_ARGS = {"distribute": distribute_args, "hostkeys": lambda _: [], "status": lambda _: ["--timeout", "2"]}
HOSTILE = {
    "host-name": ("-oProxyCommand=touch {marker}", {}, "inventory_hostname"),
    "ansible-host": (THOR, {"ansible_host": "-oProxyCommand=touch {marker}"}, "ansible_host"),
    "fanout-address": (THOR, {"specfleet_fanout_address": "-oProxyCommand=touch {marker}"},
                       "specfleet_fanout_address"),
    "ansible-user": (THOR, {"ansible_user": "-oProxyCommand=touch {marker}"}, "ansible_user"),
    "ansible-port": (THOR, {"ansible_port": "abc"}, "ansible_port"),
    "port-range": (THOR, {"ansible_port": 70000}, "ansible_port"),
}


@pytest.mark.parametrize("hostile", HOSTILE)
@pytest.mark.parametrize("command", CONNECTING_COMMANDS)
def test_connection_settings_ssh_would_read_as_options_are_refused_before_ssh_runs(
        command: str, hostile: str, tmp_path: Path):
    marker = tmp_path / "pwned"
    name, settings, variable = HOSTILE[hostile]
    name = name.format(marker=marker)
    settings = {key: value.format(marker=marker) if isinstance(value, str) else value
                for key, value in settings.items()}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {"ansible_host": "127.0.0.1", "ansible_port": 1, **settings},
        NANO: {"ansible_host": UNIT_ADDRESSES[1], "ansible_port": 1},
    }}}))
    result = run([sys.executable, "-m", "specfleet.cli", command, "-i", str(inventory),
                  *CONNECTING_ARGS[command](tmp_path)], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    complaint = result.stderr.strip().splitlines()[-1]
    assert variable in complaint and "Traceback" not in result.stderr, result.stderr
    assert name[:40] in complaint, complaint  # long values are shortened
    assert not marker.exists()


# ---- issue 39: files and options of the controller's own commands ---------------------------

GOOD_RECORD = REPO / "tests" / "fixtures" / "runs" / "lab-rollout" / "units" / "thor-01.json"


def garbled_record() -> bytes:
    """A record of the right top-level shape whose insides are of types no run writes."""
    record = json.loads(GOOD_RECORD.read_text())
    record["measurement"] = {key: 7 for key in record["measurement"]}
    return json.dumps(record).encode()


RECORDS = {
    "a-list": (b"[1, 2]", "not a map: a list"),
    "binary": (bytes(range(256)), "not UTF-8 text (a binary file?)"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 deep"),
    "truncated": (GOOD_RECORD.read_bytes()[:200], "not JSON ("),
    "no-host": (b'{"decision": "kept"}', "no 'host'"),
    "decision-a-number": (b'{"host": "thor-01", "decision": 5}', "'decision' is not a string or null: an integer"),
    "insides-garbled": (garbled_record(), "not a unit record this specfleet writes (TypeError"),
}


@pytest.mark.parametrize("kind", RECORDS)
@pytest.mark.parametrize("command", ["run", "write", "compare"])
def test_a_corrupt_unit_record_is_one_line_naming_its_file(kind: str, command: str, tmp_path: Path):
    content, message = RECORDS[kind]
    runs = tmp_path / "runs"
    for run_id in ("20261201T000000Z", "20261202T000000Z"):
        (runs / run_id / "units").mkdir(parents=True)
        shutil.copy(GOOD_RECORD, runs / run_id / "units" / "nano-01.json")
    bad = runs / "20261202T000000Z" / "units" / "thor-01.json"
    bad.write_bytes(content)
    argv = {"run": ["--run", "20261202T000000Z"], "write": ["--run", "20261202T000000Z", "--write"],
            "compare": ["--compare", "20261201T000000Z", "20261202T000000Z"]}[command]
    result = run([sys.executable, "-m", "specfleet.cli", "report", "--runs-dir", str(runs), *argv], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert f"{bad}: {message}" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not list((runs / "20261202T000000Z").glob("report.*"))


@pytest.mark.parametrize("run_id", ["../elsewhere", "/tmp/abs", ".hidden", "a/b"])
def test_a_run_id_that_is_a_path_is_refused_and_nothing_is_written(run_id: str, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere" / "units"
    elsewhere.mkdir(parents=True)
    shutil.copy(GOOD_RECORD, elsewhere / "thor-01.json")
    runs = tmp_path / "runs"
    runs.mkdir()
    for argv in (["--run", run_id, "--write"], ["--compare", run_id, run_id]):
        result = run([sys.executable, "-m", "specfleet.cli", "report", "--runs-dir", str(runs), *argv], tmp_path)
        assert result.returncode == 2 and "not a run id" in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "elsewhere").glob("report.*"))


DISTRIBUTE_ARGS = {
    "pieces-zero": (["--pieces", "0"], "argument --pieces: must be at least 1, got 0"),
    "unit-slots-zero": (["--unit-slots", "0"], "argument --unit-slots: must be at least 1, got 0"),
    "controller-slots-text": (["--controller-slots", "two"], "argument --controller-slots: 'two' is not a whole"),
    "name-a-path": (["--name", "../../etc/entry"], "--name '../../etc/entry': not an entry name"),
    "root-a-quote": (["--root", "/srv/x'; touch /tmp/y"], "--root: \"/srv/x'; touch /tmp/y\" has a quote"),
    "root-relative": (["--root", "srv/x"], "--root 'srv/x': must be an absolute path"),
    "manifest-without-files": (["--name", "nofiles"], "nofiles.json: no 'files'"),
    "manifest-files-garbled": (["--name", "garbled"], "garbled.json: files.a: not an entry with a size in bytes"),
    "manifest-binary": (["--name", "binary"], "binary.json: not UTF-8 text"),
}


@pytest.mark.parametrize("case", DISTRIBUTE_ARGS)
def test_distribute_refuses_bad_options_and_manifests_in_one_line_before_ssh(case: str, tmp_path: Path):
    argv, message = DISTRIBUTE_ARGS[case]
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    store = Path(distribute_args(tmp_path)[1])
    manifests = store / "manifests"
    (manifests / "nofiles.json").write_text(json.dumps({"name": "nofiles", "id": "x"}))
    (manifests / "garbled.json").write_text(json.dumps({"name": "garbled", "id": "x", "files": {"a": 5}}))
    (manifests / "binary.json").write_bytes(bytes(range(256)))
    base = ["--store", str(store), "--name", "entry"]
    result = run([sys.executable, "-m", "specfleet.cli", "distribute", "-i", str(inventory), *base, *argv], tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message.replace('"', "") in result.stderr.replace('"', ""), result.stderr
    assert "Traceback" not in result.stderr and "UNREACHABLE" not in result.stdout + result.stderr
