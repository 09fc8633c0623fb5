"""The whole path on the lab's emulated units over SSH: prepare, rollout, rollback.

Real Ansible, SSH, Docker engines, rsync and HTTP; only the Jetson identity and the CUDA
vLLM (the emulator, labelled as such) are stood in for.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from specfleet_lab import lab

from specfleet import event_key, serving
from specfleet import report as report_module
from tests.conftest import (
    LAB_INVENTORY,
    MODELS_STATUS,
    changed_tasks,
    lab_api_key,
    lab_decision,
    on_unit,
    recap,
    serving_options,
    unit_models,
)
from tests.conftest import lab_hosts as hosts
from tests.conftest import lab_playbook as playbook

# ~17 min here (prepare twice on 9 units, then the rollout): CI runs it, `scripts/test --slow` here;
# the default run stays under 30 minutes.
pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.ci]

# Faults for what cannot arise by itself, each only on the speculative server so the
# baseline (known-good) serving of the same unit stays healthy.
FAULTS = {
    "agxorin-jp6-02": {"only_when_speculating": True, "drafter_unbudgeted_mib": 70000},
    "agxorin-jp72-02": {"only_when_speculating": True, "reject_speculative_config": True},
    "thor-02": {"only_when_speculating": True, "crash_after_requests": 6},
}


@pytest.fixture(scope="module")
def prepared(fleet_lab):
    """Prepare the lab once for the module, checking what issue 4 asks along the way."""
    # A site's own daemon.json keys must survive the merge.
    assert on_unit("orinnx-01", "printf '{\"log-level\": \"warn\"}' > /etc/docker/daemon.json").returncode == 0
    # Check mode on a unit without daemon.json (an earlier module may have prepared thor-01:
    # its file is held aside for the check and put back unchanged, so dockerd keeps running).
    held = "/var/lib/specfleet-test-daemon.json"
    assert on_unit("thor-01", f"! test -e /etc/docker/daemon.json || mv /etc/docker/daemon.json {held}").returncode == 0
    try:
        check = playbook("prepare.yml", "--check", "--diff", "-l", "thor-01", "--tags", "docker")
        assert check.returncode == 0, check.stdout[-4000:]
        assert re.search(r'^\+\s*"default-runtime": "nvidia"', check.stdout, re.MULTILINE), check.stdout[-3000:]
        assert on_unit("thor-01", "test -e /etc/docker/daemon.json").returncode != 0, "check mode wrote the file"
    finally:
        on_unit("thor-01", f"! test -e {held} || mv {held} /etc/docker/daemon.json")

    first = playbook("prepare.yml")
    assert first.returncode == 0, first.stdout[-6000:]
    second = playbook("prepare.yml")
    assert second.returncode == 0, second.stdout[-6000:]
    return {"first": first, "second": second}


def test_prepare_is_idempotent_and_keeps_site_keys(prepared):
    counters = recap(prepared["second"].stdout)
    unit_names = set(hosts())
    assert unit_names <= set(counters)
    assert {host: counters[host]["changed"] for host in unit_names} == dict.fromkeys(unit_names, 0)
    kept = json.loads(on_unit("orinnx-01", "cat /etc/docker/daemon.json").stdout)
    assert kept["log-level"] == "warn" and kept["default-runtime"] == "nvidia"
    runtime = on_unit("thor-01", "docker info --format '{{.DefaultRuntime}}'").stdout.strip()
    assert runtime == "nvidia"


@pytest.fixture(scope="module")
def rolled_out(fleet_lab, prepared, tmp_path_factory):
    for host, faults in FAULTS.items():
        lab.set_faults(fleet_lab, host, faults)
    runs = tmp_path_factory.mktemp("runs")
    # The three faults are injected on purpose; a failed canary stops only its own key. Every
    # unit is measured, whatever an earlier module's rollout decided for the same candidate.
    settings = {"specfleet_rollout_remeasure": True}
    result = playbook("rollout.yml", "-e", json.dumps(settings),
                      env={"SPECFLEET_RUNS_DIR": str(runs)})
    run_dir = next(runs.iterdir())
    records = {path.stem: json.loads(path.read_text()) for path in (run_dir / "units").glob("*.json")}
    yield {"result": result, "records": records, "run_dir": run_dir}
    for host in FAULTS:
        lab.set_faults(fleet_lab, host, None)


def test_rollout_decisions(rolled_out):
    records = rolled_out["records"]
    assert set(records) == set(hosts()), rolled_out["result"].stdout[-5000:]
    for host in ("thor-01", "agxorin-jp6-01", "agxorin-jp72-01", "orinnx-01", "orinnano-01", SPARK):
        assert records[host]["decision"] == lab_decision(host), (host, records[host]["reasons"])
    for host in ("thor-01", "agxorin-jp6-01", "agxorin-jp72-01"):
        assert records[host]["method"] == "eagle3", records[host]
        assert records[host]["measurement"]["blocks"][:3] == ["baseline", "speculative", "baseline"]
        # 4 prompts per workload (the lab's specfleet_bench_output_check), two workloads.
        assert records[host]["measurement"]["output_check"]["compared"] == 8, records[host]["measurement"]
    # Where the unit holds both servings (Thor and AGX Orin 64GB with an 8B target) the candidate
    # serves beside the baseline: two starts decide (the baseline's before measuring, the
    # candidate's in its first block), and no block after restarts anything. Orin NX and Nano
    # fall short of two shares and restart the serving for each block after the first.
    for host in ("thor-01", "agxorin-jp6-01", "agxorin-jp72-01"):
        measured = records[host]["measurement"]
        assert measured["side_by_side"] is True, (host, measured)
        assert measured["started"] == [block == 1 for block in range(len(measured["blocks"]))], (host, measured)
        names = on_unit(host, "docker ps -a --format '{{.Names}}'").stdout.split()
        assert names == ["specfleet-vllm"], (host, names)  # the other serving went
    for host in ("orinnx-01", "orinnano-01"):
        measured = records[host]["measurement"]
        assert measured["side_by_side"] is False, (host, measured)
        assert measured["started"] == [block > 0 for block in range(len(measured["blocks"]))], (host, measured)
    # Thor with the EAGLE-3 head's published acceptance: code edits and chat both faster.
    assert any(reason.startswith("chat: throughput at c=1") and "no regression beyond the 3.0% margin" in reason
               for reason in records["thor-01"]["reasons"]), records["thor-01"]["reasons"]
    nano = records["orinnano-01"]
    assert nano["method"] != "eagle3"
    assert any("EAGLE-3 not allowed on orin_nano" in reason for reason in nano["plan_reasons"])


def test_units_serve_with_this_events_key_and_a_read_only_model_cache(rolled_out):
    """No key in the lab inventory: the first run generated one into the lab's Vault; vLLM
    then refuses /v1 without it, and the serving cannot change the models it reads."""
    key_file = event_key.key_file(LAB_INVENTORY)
    assert key_file.read_bytes().startswith(b"$ANSIBLE_VAULT;1.2;AES256;lab\n")
    key = lab_api_key()
    assert key not in rolled_out["result"].stdout + rolled_out["result"].stderr
    assert on_unit("thor-01", MODELS_STATUS, stdin="").stdout == "401"
    assert on_unit("thor-01", MODELS_STATUS, stdin=f"Authorization: Bearer {key}\n").stdout == "200"
    mounts = json.loads(on_unit("thor-01", "docker inspect -f '{{json .Mounts}}' specfleet-vllm").stdout)
    (hf_cache,) = [mount for mount in mounts if mount["Destination"] == "/root/.cache/huggingface"]
    assert hf_cache["RW"] is False, hf_cache
    write = on_unit("thor-01", "docker exec specfleet-vllm touch /root/.cache/huggingface/hub/x")
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write


@pytest.mark.parametrize(("host", "failure_class"), [
    ("agxorin-jp6-02", "oom_at_start"),
    ("agxorin-jp72-02", "spec_config_rejected"),
    ("thor-02", "server_died"),
])
def test_faulted_units_end_on_their_baseline(rolled_out, host, failure_class):
    record = rolled_out["records"][host]
    assert record["decision"] == "failed"
    assert record["failure"]["failure_class"] == failure_class, record["reasons"]
    assert record["serving"] == "baseline"
    models = unit_models(host)
    assert models.returncode == 0, f"{host} is not serving after its rollback"
    release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["kind"] == "baseline" and release["current"]["speculative_config"] is None
    # Out of memory at start is tried once more with less memory (here the 70 GB the drafter holds
    # outside vLLM's budget fills the unit whatever the share): only then does the unit fail.
    tried_again = any("ran out of memory at start" in reason and "started once more with --gpu-memory-utilization"
                      in reason for reason in record["reasons"])
    assert tried_again == (failure_class == "oom_at_start"), record["reasons"]


def test_report_written_once_with_every_unit(rolled_out):
    report = json.loads((rolled_out["run_dir"] / "report.json").read_text())
    assert report["summary"]["units"] == len(hosts())
    assert "SPECFLEET FLEET SUMMARY" in rolled_out["result"].stdout
    assert (rolled_out["run_dir"] / "report.html").read_text().count("<svg") == 3
    # The owner's alone: 0700 folders, 0600 records and reports (specfleet.report.RECORD_MODE).
    run_dir = rolled_out["run_dir"]
    assert {oct(path.stat().st_mode & 0o777) for path in (run_dir, run_dir / "units")} == {"0o700"}
    files = [*run_dir.glob("units/*.json"), *run_dir.glob("report.*"), *run_dir.glob("run.json")]
    assert len(files) > len(hosts()) and {oct(path.stat().st_mode & 0o777) for path in files} == {"0o600"}


def test_rerun_restarts_no_container(rolled_out):
    before = {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
              for host in hosts()}
    again = playbook("rollout.yml")
    after = {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
             for host in hosts()}
    assert before == after, again.stdout[-4000:]
    # And reports no change on any unit (the run folder's report is the controller's own).
    counters = recap(again.stdout)
    assert {host: counters[host]["changed"] for host in hosts()} == dict.fromkeys(hosts(), 0), \
        changed_tasks(again.stdout)


SPARK = "spark-01"
SPARK_HEAD = "nvidia/gpt-oss-120b-Eagle3-v3"


def test_dgx_spark_is_measured_on_trtllm_and_its_gate_reverts_without_inventing_acceptance(rolled_out):
    """The Spark went through the same prepare and rollout: trtllm-serve with the EAGLE-3 head
    read from its checkpoint path, benchmarked like the Jetsons. On the emulator the head costs
    more than it saves (five draft passes through a 1.9 GiB head, an estimate, against ~2.7 GiB
    of active MoE weights per target pass), so the gate reverts it. TensorRT-LLM's /metrics
    has no speculative counters, and acceptance says so."""
    record = rolled_out["records"][SPARK]
    assert (record["device_class"], record["method"]) == ("dgx_spark", "eagle3"), record["reasons"]
    assert record["image"].endswith("/nvidia/tensorrt-llm/release:1.2.0rc6")  # through the lab's mirror
    assert record["decision"] == "reverted" and record["serving"] == "baseline", record["reasons"]
    assert record["speculative"]["ok"] and record["baseline"]["ok"]
    assert record["speculative"]["context"]["hardware"].endswith("(dgx_spark), DGX OS 7.2.3")
    assert record["speculative"]["context"]["runtime"]["server_version"] == "1.2.0rc6"
    assert "code_edit: speculative acceptance at c=1 unavailable (the server exposes no spec-decode counters)" \
        in record["reasons"]
    link = on_unit(SPARK, f"readlink /var/lib/specfleet/huggingface/checkpoints/{SPARK_HEAD}").stdout.strip()
    assert link.startswith("../../hub/models--nvidia--gpt-oss-120b-Eagle3-v3/snapshots/")
    release = json.loads(on_unit(SPARK, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["kind"] == release["known_good"]["kind"] == "baseline"
    path, served = serving_options(SPARK)
    assert path == "/etc/specfleet/trtllm/baseline.yml"
    assert served == serving.files(release["current"])[path] and "speculative_config" not in yaml.safe_load(served)


def test_rollback_playbook_restores_known_good(rolled_out):
    result = playbook("rollback.yml", "-l", "thor-01")
    assert result.returncode == 0, result.stdout[-4000:]
    release = json.loads(on_unit("thor-01", "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["spec_id"] == release["known_good"]["spec_id"]
    assert on_unit("thor-01", "curl -sf http://127.0.0.1:8000/health").returncode == 0


def test_power_mode_is_set_recorded_with_each_measurement_and_reported(rolled_out):
    """Prepare and the rollout put every Jetson in MAXN with pinned clocks (the lab's nvpmodel and
    jetson_clocks stand-ins, which the emulator's speed follows) and the report shows each unit's
    mode; the DGX Spark has no nvpmodel and says so."""
    units = {unit["host"]: unit for unit in json.loads((rolled_out["run_dir"] / "report.json").read_text())["units"]}
    measured = [host for host, record in rolled_out["records"].items() if record.get("baseline")]
    assert len(measured) >= len(hosts()) - 1, "nearly every unit measured its baseline"
    for host in measured:
        # Each module's maximum mode by its own name: the Orin Nano Super's is MAXN_SUPER.
        maximum = "MAXN_SUPER" if host.startswith("orinnano") else "MAXN"
        expected = "no nvpmodel (not a Jetson)" if host == SPARK else f"{maximum}, clocks pinned"
        assert report_module.power(units[host]) == expected, (host, units[host].get("baseline", {}).get("context"))
    assert "MAXN, clocks pinned" in (rolled_out["run_dir"] / "report.md").read_text()
    assert on_unit("thor-01", "nvpmodel -q").stdout.splitlines()[:2] == ["NV Power Mode: MAXN", "0"]


def test_prepare_stages_the_event_manifest_and_reports_holdings(rolled_out):
    event = json.dumps({"specfleet_event_models": ["Qwen/Qwen3-0.6B", "nvidia/Llama-3.1-8B-Instruct-FP8"]})
    # JSON results: one line per message (the checkout's YAML format folds long ones).
    result = playbook("prepare.yml", "-l", "thor-01,agxorin-jp72-01", "--tags", "hf_cache", "-e", event,
                      env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    assert result.returncode == 0, result.stdout[-4000:]
    holdings = dict(re.findall(r'"msg": "(thor-01|agxorin-jp72-01): (holds [^"]*)"', result.stdout))
    assert holdings["thor-01"] == (
        "holds 5/5 models: nvidia/Llama-3.1-8B-Instruct-FP4, yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, Qwen/Qwen3-0.6B, "
        "nvidia/Llama-3.1-8B-Instruct-FP8, meta-llama/Llama-3.2-1B-Instruct"), result.stdout[-3000:]
    orin = holdings["agxorin-jp72-01"]
    assert orin.startswith("holds 3/3 models: meta-llama/Llama-3.1-8B-Instruct, yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, "
                           "Qwen/Qwen3-0.6B; not staged (the unit cannot serve them): "
                           "nvidia/Llama-3.1-8B-Instruct-FP8 is FP8 (ModelOpt)"), orin
    for repo in ("Qwen--Qwen3-0.6B", "nvidia--Llama-3.1-8B-Instruct-FP8"):
        assert on_unit("thor-01", f"test -L /var/lib/specfleet/huggingface/hub/models--{repo}").returncode == 0
    fp8 = "/var/lib/specfleet/huggingface/hub/models--nvidia--Llama-3.1-8B-Instruct-FP8"
    assert on_unit("agxorin-jp72-01", f"test -e {fp8}").returncode != 0
