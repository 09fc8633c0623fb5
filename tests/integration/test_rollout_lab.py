"""The whole path on the lab's emulated units over SSH: prepare, rollout, rollback.

Real Ansible, SSH, Docker engines, rsync and HTTP; only the Jetson identity and the CUDA
vLLM (the emulator, labelled as such) are stood in for.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from specfleet_lab import lab

from specfleet import report as report_module
from specfleet import serving
from tests.conftest import REPO, lab_decision, on_unit
from tests.conftest import lab_hosts as hosts

pytestmark = pytest.mark.lab
INVENTORY = REPO / "inventory" / "lab"

# Faults for what cannot arise by itself, each only on the speculative server so the
# baseline (known-good) serving of the same unit stays healthy.
FAULTS = {
    "agxorin-jp6-02": {"only_when_speculating": True, "drafter_unbudgeted_mib": 70000},
    "agxorin-jp72-02": {"only_when_speculating": True, "reject_speculative_config": True},
    "thor-02": {"only_when_speculating": True, "crash_after_requests": 6},
}


def playbook(name: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(binary), "-i", str(INVENTORY), f"playbooks/{name}", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", **(env or {})},
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    counters = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE):
        counters[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", fields)}
    return counters


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
    # The three faults are injected on purpose: one wave and no failure budget, so every unit
    # is rolled out (Ansible ends a play outright when every host of a wave fails). Every unit
    # is measured, whatever an earlier module's rollout decided for the same candidate.
    settings = {"specfleet_rollout_serial": ["100%"], "specfleet_rollout_max_fail_percentage": 100,
                "specfleet_rollout_remeasure": True}
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
    # Thor's FP4 target is fast enough that five drafted positions cost chat more than they bring.
    assert any(reason.startswith("chat: throughput at c=1") and "regresses beyond the 3.0% margin" in reason
               for reason in records["thor-01"]["reasons"]), records["thor-01"]["reasons"]
    nano = records["orinnano-01"]
    assert nano["method"] != "eagle3"
    assert any("EAGLE-3 not allowed on orin_nano" in reason for reason in nano["plan_reasons"])


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
    models = on_unit(host, "curl -sf http://127.0.0.1:8000/v1/models")
    assert models.returncode == 0, f"{host} is not serving after its rollback"
    release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["kind"] == "baseline" and release["current"]["speculative_config"] is None
    # Out of memory at start is tried once more with less memory (here the 70 GB the drafter holds
    # outside vLLM's budget fills the unit whatever the share): only then does the unit fail.
    tried_again = any("ran out of memory at start" in reason and "started once more with --gpu-memory-utilization"
                      in reason for reason in record["reasons"])
    assert tried_again == (failure_class == "oom_at_start"), record["reasons"]


def test_out_of_memory_at_start_is_tried_once_more_with_less_memory_and_measured(fleet_lab, rolled_out, tmp_path):
    """A drafter holding memory outside vLLM's budget leaves less free than the speculative
    serving's --gpu-memory-utilization asks for, but more than its plan's lighter variant asks
    for: the rollout starts the variant in its place, measures it and records it; a re-run
    serves that variant again without measuring."""
    host = "agxorin-jp6-02"
    plan = json.loads(subprocess.run(
        [str(Path(sys.executable).with_name("specfleet")), "plan", "-i", str(INVENTORY), "--format", "json"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout)
    plan = next(entry for entry in plan if entry["host"] == host)
    planned, lighter = plan["gpu_memory_utilization"], float(
        dict(serving.engine_flags(plan["oom_retry"]["serving"]))["--gpu-memory-utilization"])
    total_gib = json.loads(on_unit(host, "cat /etc/specfleet-lab/gpu.json").stdout)["memory_total_mib"] / 1024
    # Free memory as the emulator counts it: total - the OS's share - what the drafter holds.
    os_gib = min(3.0, max(0.5, 0.06 * total_gib))
    free_gib = (planned + lighter) / 2 * total_gib
    held_mib = int((total_gib - os_gib - free_gib) * 1024)
    lab.set_faults(fleet_lab, host, {"only_when_speculating": True, "drafter_unbudgeted_mib": held_mib})
    try:
        result = playbook("rollout.yml", "-l", host, "-e", "specfleet_rollout_remeasure=true",
                          env={"SPECFLEET_RUNS_DIR": str(tmp_path / "first")})
        record = json.loads(next((tmp_path / "first").glob(f"*/units/{host}.json")).read_text())
        assert record["speculative"]["ok"], (record["reasons"], result.stdout[-4000:])
        (why,) = [reason for reason in record["reasons"] if "ran out of memory at start" in reason]
        assert "Free memory on device" in why and f"--gpu-memory-utilization {lighter:.2f} (was {planned:.2f})" in why
        assert record["decision"] == lab_decision(host) == "kept", record["reasons"]
        release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
        # What serves now is what was measured and kept: the variant.
        assert dict(serving.engine_flags(release["current"]))["--gpu-memory-utilization"] == f"{lighter:.2f}"
        assert result.returncode == 0, record["reasons"]
        started = on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
        again = playbook("rollout.yml", "-l", host, env={"SPECFLEET_RUNS_DIR": str(tmp_path / "again")})
        assert again.returncode == 0, again.stdout[-4000:]
        reused = json.loads(next((tmp_path / "again").glob(f"*/units/{host}.json")).read_text())
        assert reused["decision"] == record["decision"] and reused.get("reused_from"), reused["reasons"]
        assert on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout == started
    finally:
        lab.set_faults(fleet_lab, host, None)


def test_report_written_once_with_every_unit(rolled_out):
    report = json.loads((rolled_out["run_dir"] / "report.json").read_text())
    assert report["summary"]["units"] == len(hosts())
    assert "SPECFLEET FLEET SUMMARY" in rolled_out["result"].stdout
    assert (rolled_out["run_dir"] / "report.html").read_text().count("<svg") == 3


def test_rerun_restarts_no_container(rolled_out):
    before = {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
              for host in hosts()}
    again = playbook("rollout.yml")
    after = {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
             for host in hosts()}
    assert before == after, again.stdout[-4000:]


SPARK = "spark-01"
SPARK_HEAD = "nvidia/gpt-oss-120b-Eagle3-long-context"


def serving_options(host: str) -> tuple[str, str]:
    """The options file of the serving the unit's record says it runs, and its text as the
    running trtllm-serve was started with it (the path is on its command line)."""
    current = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)["current"]
    (path,) = serving.files(current)
    args = json.loads(on_unit(host, "docker inspect -f '{{json .Args}}' specfleet-vllm").stdout)
    assert path in args, (path, args)
    return path, on_unit(host, f"docker exec specfleet-vllm cat {path}").stdout


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
    assert link.startswith("../../hub/models--nvidia--gpt-oss-120b-Eagle3-long-context/snapshots/")
    release = json.loads(on_unit(SPARK, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["kind"] == release["known_good"]["kind"] == "baseline"
    path, served = serving_options(SPARK)
    assert path == "/etc/specfleet/trtllm/baseline.yml"
    assert served == serving.files(release["current"])[path] and "speculative_config" not in yaml.safe_load(served)


def test_dgx_spark_rejected_config_rolls_back_and_rollback_restarts_its_files(fleet_lab, rolled_out, tmp_path):
    """trtllm-serve refusing the speculative options is classified from its own log and the
    unit ends on its baseline; rollback.yml then starts that serving again from the release
    record alone, options file included."""
    lab.set_faults(fleet_lab, SPARK, {"only_when_speculating": True, "reject_speculative_config": True})
    try:
        result = playbook("rollout.yml", "-l", SPARK, "-e", "specfleet_rollout_remeasure=true",
                          env={"SPECFLEET_RUNS_DIR": str(tmp_path)})
    finally:
        lab.set_faults(fleet_lab, SPARK, None)
    assert result.returncode != 0, "a unit whose candidate fails counts as failed"
    record = json.loads(next(tmp_path.glob(f"*/units/{SPARK}.json")).read_text())
    assert record["decision"] == "failed" and record["serving"] == "baseline", record["reasons"]
    assert record["failure"]["failure_class"] == "spec_config_rejected", record["failure"]
    assert on_unit(SPARK, "docker rm -f specfleet-vllm").returncode == 0
    rollback = playbook("rollback.yml", "-l", SPARK)
    assert rollback.returncode == 0, rollback.stdout[-4000:]
    assert on_unit(SPARK, "curl -sf http://127.0.0.1:8000/v1/models").returncode == 0
    release = json.loads(on_unit(SPARK, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["spec_id"] == release["known_good"]["spec_id"]
    path, served = serving_options(SPARK)
    assert served == serving.files(release["known_good"])[path]


def test_a_port_from_the_policy_is_served_waited_on_and_measured(rolled_out, tmp_path):
    """specfleet_port reaches every part of the serving through the plan: the server listens
    there, readiness waits there and the benchmark measures there, so the unit is decided on
    its measurements (as at 8000), not failed as never ready. Reverted (Thor's chat, as at
    8000), it goes back to its last known-good: the baseline it served at 8000."""
    host = "thor-01"
    runs = tmp_path / "port"
    moved = playbook("rollout.yml", "-l", host, "-e", '{"specfleet_port": 9000, "specfleet_rollout_remeasure": true}',
                     env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert moved.returncode == 0, moved.stdout[-4000:]
    record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
    assert (record["decision"], record["method"]) == (lab_decision(host), "eagle3"), record["reasons"]
    for side in ("baseline", "speculative"):
        assert record[side]["ok"] and record[side]["endpoint"] == "http://127.0.0.1:9000", record[side]
    assert record["measurement"]["blocks"][:3] == ["baseline", "speculative", "baseline"]
    release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"] == release["known_good"] and release["current"]["port"] == 8000
    assert on_unit(host, "curl -sf http://127.0.0.1:8000/v1/models").returncode == 0
    assert on_unit(host, "curl -sf http://127.0.0.1:9000/health").returncode != 0


def test_rollback_playbook_restores_known_good(rolled_out):
    result = playbook("rollback.yml", "-l", "thor-01")
    assert result.returncode == 0, result.stdout[-4000:]
    release = json.loads(on_unit("thor-01", "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["spec_id"] == release["known_good"]["spec_id"]
    assert on_unit("thor-01", "curl -sf http://127.0.0.1:8000/health").returncode == 0


def test_kept_serving_that_no_longer_starts_is_measured_again(fleet_lab, rolled_out, tmp_path):
    """A unit whose kept speculative container went away and no longer starts (here: its
    engine now rejects the config) is not left serving nothing: the re-run measures it again
    from its baseline, which it then serves as its known-good."""
    host = "agxorin-jp72-01"
    assert rolled_out["records"][host]["decision"] == "kept"
    lab.set_faults(fleet_lab, host, {"only_when_speculating": True, "reject_speculative_config": True})
    assert on_unit(host, "docker rm -f specfleet-vllm").returncode == 0
    try:
        result = playbook("rollout.yml", "-l", host, env={"SPECFLEET_RUNS_DIR": str(tmp_path)})
        assert result.returncode != 0, "a unit whose candidate fails counts as failed"
        record = json.loads(next(tmp_path.glob(f"*/units/{host}.json")).read_text())
        assert record["decision"] == "failed" and record["serving"] == "baseline", record["reasons"]
        assert record["failure"]["failure_class"] == "spec_config_rejected"
        assert "did not start again (spec_config_rejected): measured again" in record["reasons"][-1]
        assert record["baseline"]["ok"]
        release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
        assert release["current"]["kind"] == release["known_good"]["kind"] == "baseline"
        assert on_unit(host, "curl -sf http://127.0.0.1:8000/v1/models").returncode == 0
    finally:
        lab.set_faults(fleet_lab, host, None)
    # Without the fault the candidate starts again and is measured when asked to, and the gate
    # decides as for any unit of its kind.
    runs = tmp_path / "again"
    again = playbook("rollout.yml", "-l", host, "-e", "specfleet_rollout_remeasure=true",
                     env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert again.returncode == 0, again.stdout[-4000:]
    record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
    assert record["decision"] == lab_decision(host) and record["speculative"]["ok"], record["reasons"]
    assert json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)["current"]["kind"] == "speculative"


def test_a_rebooted_unit_serves_its_decided_config_again_without_a_rollout(fleet_lab, rolled_out):
    """The decided serving carries a restart policy: after a power cycle the unit's own dockerd
    starts it again, the same configuration, before (and without) any playbook run."""
    host = "agxorin-jp6-01"
    assert rolled_out["records"][host]["decision"] == "kept"
    inspect = "docker inspect --format '{{.HostConfig.RestartPolicy.Name}} {{.State.StartedAt}} " \
              "{{index .Config.Labels \"org.specfleet.config-hash\"}}' specfleet-vllm"
    policy, started, config = on_unit(host, inspect).stdout.split()
    assert policy == "unless-stopped"
    release = on_unit(host, "cat /var/lib/specfleet/release.json").stdout
    lab.reboot(fleet_lab, host)
    deadline = time.monotonic() + 300
    while on_unit(host, "curl -sf http://127.0.0.1:8000/v1/models").returncode != 0:
        assert time.monotonic() < deadline, f"{host} serves nothing after its reboot"
        time.sleep(3)
    policy_after, started_after, config_after = on_unit(host, inspect).stdout.split()
    assert started_after != started, "the serving container did not go through the reboot"
    assert (policy_after, config_after) == (policy, config)
    assert on_unit(host, "cat /var/lib/specfleet/release.json").stdout == release
    argv = json.loads(on_unit(host, "docker inspect --format '{{json .Config.Cmd}}' specfleet-vllm").stdout)
    current = json.loads(release)["current"]
    assert argv == serving.argv(current)[1:]


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


def test_a_precision_the_gpu_cannot_run_fails_classified_and_rolls_back(rolled_out, tmp_path):
    """Forced past the plan's capability check, Orin NX gets the ModelOpt FP8 checkpoint: the
    (emulated) vLLM refuses it with its own message, the launch classifies that, and the unit
    goes back to the known-good it served before."""
    host = "orinnx-01"
    forced = json.dumps({"specfleet_model": "nvidia/Llama-3.1-8B-Instruct-FP8", "specfleet_capability_check": False,
                         "specfleet_rollout_remeasure": True})
    before = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    staged = playbook("prepare.yml", "-l", host, "--tags", "hf_cache", "-e", forced)
    assert staged.returncode == 0, staged.stdout[-4000:]
    result = playbook("rollout.yml", "-l", host, "-e", forced, env={"SPECFLEET_RUNS_DIR": str(tmp_path)})
    assert result.returncode != 0, "a unit whose serving cannot start counts as failed"
    record = json.loads(next(tmp_path.glob(f"*/units/{host}.json")).read_text())
    assert record["decision"] == "failed", record["reasons"]
    assert record["failure"]["failure_class"] == "gpu_unsupported", record["failure"]
    assert "Minimum capability: 89. Current capability: 87." in " ".join(record["reasons"])
    after = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    assert after["current"]["spec_id"] == before["current"]["spec_id"], "not back on what it served before"
    assert on_unit(host, "curl -sf http://127.0.0.1:8000/v1/models").returncode == 0


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


def test_each_keys_canary_sweeps_the_draft_length_and_its_later_units_take_the_choice(fleet_lab, prepared, tmp_path):
    """One key (AGX Orin, BF16 + EAGLE-3, JetPack 6 image), swept over k = 2 and 4: its canary
    measures both between its baseline blocks. The emulator's figures decide (noiseless: k=2
    1.64x code edits, 1.02x chat; k=4 1.91x code edits but 0.91x chat, a loss beyond the margin),
    so k=2 is kept and chosen; the key's other unit is planned with k=2 (not the class's 3) and
    kept on its own measurement; the report shows both. A second run changes nothing."""
    canary, later = "agxorin-jp6-01", "agxorin-jp6-02"
    lab.set_faults(fleet_lab, later, None)  # the module's OOM fault on the candidate, if it was set
    settings = {"specfleet_spec_tokens_sweep": {"agx_orin": [2, 4]}, "specfleet_rollout_remeasure": True}
    runs = tmp_path / "sweep"
    result = playbook("rollout.yml", "-l", f"{canary},{later}", "-e", json.dumps(settings),
                      env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert result.returncode == 0, result.stdout[-6000:]
    records = {host: json.loads(next(runs.glob(f"*/units/{host}.json")).read_text()) for host in (canary, later)}
    first = records[canary]
    measured = [(entry["tokens"], entry["decision"]) for entry in first["sweep"]["measured"]]
    assert measured == [(2, "keep"), (4, "revert")], first["reasons"]
    assert (first["decision"], first["sweep"]["chosen"], first["num_speculative_tokens"]) == ("kept", 2, 2)
    assert any(reason.startswith("draft length measured: k=2 keep") for reason in first["reasons"])
    assert first["measurement"]["blocks"] == ["baseline", "speculative", "baseline"]
    second = records[later]
    assert (second["decision"], second["num_speculative_tokens"]) == ("kept", 2), second["reasons"]
    assert second["sweep"] == {"canary": canary, "chosen": 2}
    assert f"num_speculative_tokens 2 (planned 3): chosen by {canary}'s sweep" in second["plan_reasons"]
    for host in (canary, later):
        current = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)["current"]
        assert current["speculative_config"]["num_speculative_tokens"] == 2, current
    (report_md,) = runs.glob("*/report.md")
    table = report_md.read_text()
    assert "k=2 keep" in table and "k=4 revert" in table and f"k=2 from {canary}" in table, table
    # A re-run restarts nothing (as test_rerun_restarts_no_container asks of every unit): the
    # canary plans its recorded choice, the later unit its canary's, and both reuse their decision.
    started = {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
               for host in (canary, later)}
    again = playbook("rollout.yml", "-l", f"{canary},{later}", "-e",
                     json.dumps({"specfleet_spec_tokens_sweep": {"agx_orin": [2, 4]}}),
                     env={"SPECFLEET_RUNS_DIR": str(tmp_path / "again")})
    assert again.returncode == 0, again.stdout[-4000:]
    assert {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
            for host in (canary, later)} == started, again.stdout[-4000:]
    reused = {host: json.loads(next((tmp_path / "again").glob(f"*/units/{host}.json")).read_text())
              for host in (canary, later)}
    assert all(record["reused_from"] and record["num_speculative_tokens"] == 2 for record in reused.values())
