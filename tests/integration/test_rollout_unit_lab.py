"""Single-unit rollouts on the lab's emulated units, each under a fault or a setting of its own:
out of memory at start, a kept serving that no longer starts, a rejected TensorRT-LLM config, a
port from the policy, a rollout killed while its candidate is on trial, a cache repair killed at its
switch, a reboot, a precision the GPU cannot run, and a canary's draft-length sweep.

A slow lane: test_rollout_lab.py (CI's lane before it) rolls the whole fleet out
once; these start from each unit's decision, and make it themselves when that module did not
run first. Real Ansible, SSH, Docker engines, rsync and HTTP; only the Jetson identity and the
CUDA vLLM (the emulator, labelled as such) are stood in for.
"""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT
from specfleet_lab import lab

from specfleet import serving
from tests.conftest import (
    LAB_INVENTORY,
    REPO,
    changed_tasks,
    kill_when,
    lab_decision,
    on_unit,
    recap,
    serving_options,
    start_lab_playbook,
    unit_models,
)
from tests.conftest import lab_playbook as playbook
from tests.integration.test_fault_matrix_lab import HF_HUB, lab_vars

# ~30 min: not `ci` (pyproject.toml's markers say why); `scripts/test --slow` runs it.
pytestmark = [pytest.mark.lab, pytest.mark.slow]
SPARK = "spark-01"
# The units whose tests start from a decision (a kept or a reverted serving, with its known-good).
DECIDED = ("thor-01", "agxorin-jp6-01", "agxorin-jp72-01", "orinnx-01")


@pytest.fixture(scope="module")
def decided(fleet_lab, tmp_path_factory) -> dict[str, dict]:
    """The module's units prepared, and DECIDED rolled out: after the default lane's rollout a
    re-run that reuses each unit's decision; on a lab brought up since, a measured one."""
    prepared = playbook("prepare.yml", "-l", ",".join((*DECIDED, "agxorin-jp6-02", "thor-02", SPARK)))
    assert prepared.returncode == 0, prepared.stdout[-6000:]
    runs = tmp_path_factory.mktemp("decided")
    result = playbook("rollout.yml", "-l", ",".join(DECIDED), env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert result.returncode == 0, result.stdout[-6000:]
    records = {path.stem: json.loads(path.read_text()) for path in next(runs.iterdir()).glob("units/*.json")}
    assert {host: records[host]["decision"] for host in DECIDED} == {host: lab_decision(host) for host in DECIDED}
    return records


def test_out_of_memory_at_start_is_tried_once_more_with_less_memory_and_measured(fleet_lab, decided, tmp_path):
    """A drafter holding memory outside vLLM's budget leaves less free than the speculative
    serving's --gpu-memory-utilization asks for, but more than its plan's lighter variant asks
    for: the rollout starts the variant in its place, measures it and records it; a re-run
    serves that variant again without measuring."""
    host = "agxorin-jp6-02"
    plan = json.loads(subprocess.run(
        [str(Path(sys.executable).with_name("specfleet")), "plan", "-i", str(LAB_INVENTORY), "--format", "json"],
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


def test_kept_serving_that_no_longer_starts_is_measured_again(fleet_lab, decided, tmp_path):
    """A unit whose kept speculative container went away and no longer starts (here: its
    engine now rejects the config) is not left serving nothing: the re-run measures it again
    from its baseline, which it then serves as its known-good."""
    host = "agxorin-jp72-01"
    assert decided[host]["decision"] == "kept"
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
        assert unit_models(host).returncode == 0
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


def test_dgx_spark_rejected_config_rolls_back_and_rollback_restarts_its_files(fleet_lab, decided, tmp_path):
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
    assert unit_models(SPARK).returncode == 0
    release = json.loads(on_unit(SPARK, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["spec_id"] == release["known_good"]["spec_id"]
    path, served = serving_options(SPARK)
    assert served == serving.files(release["known_good"])[path]


def test_a_port_from_the_policy_is_served_waited_on_and_measured(decided, tmp_path):
    """specfleet_port (and specfleet_trial_port, where the candidate serves beside the baseline)
    reach every part of the serving through the plan: the servers listen there, readiness waits
    there and the benchmark measures there, so the unit is decided on its measurements (as at
    8000 and 8001), not failed as never ready. Reverted (Thor's chat, as at 8000), it goes back
    to its last known-good: the baseline it served at 8000."""
    host = "thor-01"
    runs = tmp_path / "port"
    settings = {"specfleet_port": 9000, "specfleet_trial_port": 9001, "specfleet_rollout_remeasure": True}
    moved = playbook("rollout.yml", "-l", host, "-e", json.dumps(settings), env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert moved.returncode == 0, moved.stdout[-4000:]
    record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
    assert (record["decision"], record["method"]) == (lab_decision(host), "eagle3"), record["reasons"]
    for side, port in (("baseline", 9000), ("speculative", 9001)):
        assert record[side]["ok"] and record[side]["endpoint"] == f"http://127.0.0.1:{port}", record[side]
    assert record["measurement"]["blocks"][:3] == ["baseline", "speculative", "baseline"]
    release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"] == release["known_good"] and release["current"]["port"] == 8000
    assert unit_models(host).returncode == 0
    for port in (9000, 9001):
        assert on_unit(host, f"curl -sf http://127.0.0.1:{port}/health").returncode != 0


def running_container(host: str, name: str = LAYOUT["serving_container"]) -> dict | None:
    """The serving container (or the trial one) as the unit's dockerd runs it (None while there is
    none): its id, its state, its arguments after the entrypoint and vllm_container's config-hash label."""
    inspected = on_unit(host, f"docker inspect {name}", timeout=20)
    if inspected.returncode != 0:
        return None
    (container,) = json.loads(inspected.stdout)
    return {"id": container["Id"], "status": container["State"]["Status"], "args": container["Args"],
            "config_hash": (container["Config"]["Labels"] or {}).get(LAYOUT["config_hash_label"])}


def test_a_rollout_killed_after_its_candidate_started_is_rolled_back_by_the_next_run(fleet_lab, decided, tmp_path):
    """A rollout killed (SIGKILL to ansible-playbook's process group: no rescue, no cleanup, as a
    controller that dies) once its speculative candidate is up leaves that candidate serving,
    unvetted, beside the baseline (a Thor holds both); the record's trial marker names it and the
    known-good. The next run puts the known-good back first (the same configuration: config
    hash) and the candidate goes, its unit record says the previous run was interrupted during
    that trial, and it goes on as usual (here: the unit's earlier decision, reused); a run after
    that changes nothing."""
    host = "thor-01"
    assert decided[host]["decision"] == "reverted"
    before = json.loads(on_unit(host, f"cat {LAYOUT['release_file']}").stdout)
    known_good = before["known_good"]
    assert before["current"] == known_good and known_good["kind"] == "baseline" and "trial" not in before, before
    serving_before = running_container(host)
    assert serving_before["args"] == serving.argv(known_good)[1:], serving_before
    # A speculative server that takes 20 s (the lab's time scale) to become ready: the window in
    # which the run is killed with its candidate up.
    lab.set_faults(fleet_lab, host, {"only_when_speculating": True, "startup_delay_s": 400})
    log = tmp_path / "killed.log"
    try:
        run = start_lab_playbook("rollout.yml", "-l", host, "-e", "specfleet_rollout_remeasure=true",
                                 env={"SPECFLEET_RUNS_DIR": str(tmp_path / "killed")}, output=log)
        trial_container = LAYOUT["trial_container"]
        kill_when(run, log, lambda: "--speculative-config" in (
            (running_container(host, trial_container) or {}).get("args") or []), 1200, "its candidate started")
    finally:
        lab.set_faults(fleet_lab, host, None)
    # The state the issue is about: the record says the baseline serves (with its share, beside
    # the candidate) and the known-good it returns to; the unit runs the candidate too.
    left = json.loads(on_unit(host, f"cat {LAYOUT['release_file']}").stdout)
    assert left["known_good"]["spec_id"] == known_good["spec_id"], left["known_good"]
    assert left["current"]["kind"] == "baseline" and left["current"]["port"] == known_good["port"], left["current"]
    trial = left["trial"]
    assert (trial["kind"], trial["known_good_spec_id"]) == ("speculative", known_good["spec_id"]), trial
    assert "--speculative-config" in running_container(host, trial_container)["args"]

    runs = tmp_path / "next"
    again = playbook("rollout.yml", "-l", host, env={"SPECFLEET_RUNS_DIR": str(runs)})
    assert again.returncode == 0, again.stdout[-4000:]
    record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
    assert record["decision"] == lab_decision(host) and record.get("reused_from"), record["reasons"]
    assert record["reasons"][-1] == (
        f"the previous run was interrupted during the trial of the speculative serving {trial['spec_id'][:8]} "
        f"({trial['method']}, k={trial['num_speculative_tokens']}) in run {trial['run_id']}: rolled back to the "
        f"known-good baseline serving {known_good['spec_id'][:8]} first"), record["reasons"]
    after = json.loads(on_unit(host, f"cat {LAYOUT['release_file']}").stdout)
    assert after["current"] == after["known_good"] == known_good and "trial" not in after, after
    serving_after = running_container(host)
    assert serving_after["status"] == "running" and serving_after["args"] == serving.argv(known_good)[1:]
    assert serving_after["config_hash"] == serving_before["config_hash"]
    assert running_container(host, trial_container) is None  # the unvetted candidate went
    assert unit_models(host).returncode == 0

    third = playbook("rollout.yml", "-l", host, env={"SPECFLEET_RUNS_DIR": str(tmp_path / "third")})
    assert third.returncode == 0, third.stdout[-4000:]
    assert recap(third.stdout)[host]["changed"] == 0, changed_tasks(third.stdout)
    assert running_container(host)["id"] == serving_after["id"]
    assert json.loads(on_unit(host, f"cat {LAYOUT['release_file']}").stdout) == after


# Test-only, placed on the test's own unit and removed by it: site's usercustomize (imported at
# start-up by every Python of the login user) holds one `os` function, at its first call on a path
# below the model cache, writes its pid to PAUSED and sleeps there, for the test to SIGKILL it.
PAUSE_AT, PAUSED = "/run/specfleet-test-pause-at", "/run/specfleet-test-paused"
PAUSE_HOOK = f"""\
import os, time
try:
    _step, _root = open({PAUSE_AT!r}).read().split()
except OSError:
    _step = None
if _step:
    _real = getattr(os, _step)

    def _paused(*args, **kwargs):
        path = os.fspath(args[0])
        if os.path.abspath(path).startswith(_root + os.sep):
            with open({PAUSED!r}, "w") as out:
                out.write(f"{{os.getpid()}} {{_step}} {{path}}\\n")
            while True:
                time.sleep(60)
        return _real(*args, **kwargs)

    setattr(os, _step, _paused)
"""


def test_a_cache_repair_killed_before_its_switch_leaves_the_old_live_cache(fleet_lab, decided, tmp_path):
    """prepare.yml repairs a model whose live copy lost the end of a file: the verified copy is
    moved beside it, and the cache_store module on the unit is SIGKILLed (with the controller's
    ansible-playbook) just before the one rename that switches the live link. The live model is
    the old tree, in place and whole as it was (not a dangling link, not a mix); the next run
    switches to the verified copy and removes the old one; a third run changes nothing."""
    host = "agxorin-jp6-02"
    # A model the unit's plan keeps (the hub may also hold others, left by earlier plans, which
    # prepare leaves alone): the first one prepare compares, from a run that finds all in place
    # (every task run, not only the role's question, so that the comparison is printed).
    settled = playbook("prepare.yml", "-l", host, "--tags", "hf_cache", "-e", "specfleet_hf_cache_ask_first=false")
    assert settled.returncode == 0, settled.stdout[-4000:]
    compared = settled.stdout.split("Compare the unit's copy of each model with its manifest", 1)[1]
    repo_id = re.search(r"\(item=([^)]+)\)", compared).group(1)
    model = "models--" + repo_id.replace("/", "--")
    blob = on_unit(host, f"find -L {HF_HUB}/{model} -path '*/blobs/*' -type f -size +0 | sort | head -1").stdout.strip()
    assert blob, model
    assert on_unit(host, f"truncate -s 100 {blob}").returncode == 0

    def live() -> tuple[str, str]:
        """(the version the live link resolves to, its tree's digests)."""
        target = on_unit(host, f"readlink -e {HF_HUB}/{model}").stdout.strip()
        tree = on_unit(host, f"cd {target} && find . -type f -exec sha256sum {{}} + | sort").stdout
        return target, tree

    before = live()
    site_dir = on_unit(host, "python3 -c 'import site; print(site.getusersitepackages())'").stdout.strip()
    hook = f"{site_dir}/usercustomize.py"
    try:
        assert on_unit(host, f"mkdir -p {site_dir} && cat > {hook}", stdin=PAUSE_HOOK).returncode == 0
        assert on_unit(host, f"echo replace {posixpath.dirname(HF_HUB)} > {PAUSE_AT}").returncode == 0
        log = tmp_path / "killed.log"
        run = start_lab_playbook("prepare.yml", "-l", host, "--tags", "hf_cache", output=log)
        # The module on the unit is killed as well (the controller's death does not end it).
        paused = kill_when(run, log, lambda: on_unit(host, f"cat {PAUSED} 2>/dev/null").stdout.split(), 900,
                           "prepare reached a model's switch")
        pid, step, path = paused
        assert on_unit(host, f"kill -9 {pid}").returncode == 0
    finally:
        on_unit(host, f"rm -f {hook} {PAUSE_AT} {PAUSED}")
    assert step == "replace" and path.startswith(f"{HF_HUB}/{model}"), paused
    # Killed at the switch: the old tree is still the live model, unchanged; the verified copy waits beside it.
    assert live() == before
    versions = on_unit(host, f"ls -1 {posixpath.dirname(HF_HUB)}/.specfleet/versions/{model}").stdout.split()
    assert len(versions) == 2 and posixpath.basename(before[0]) in versions, versions

    again = playbook("prepare.yml", "-l", host, "--tags", "hf_cache")
    assert again.returncode == 0, again.stdout[-4000:]
    # The repaired model is its controller manifest, file for file (other models on the unit are not this test's).
    manifest = json.loads((Path(lab_vars()["specfleet_hf_cache_store"]) / "manifests" / f"{model}.json").read_text())
    repaired = dict(reversed(line.split(maxsplit=1)) for line in live()[1].splitlines())
    assert {path.removeprefix("./"): digest for path, digest in repaired.items()} == {
        path: entry["sha256"] for path, entry in manifest["files"].items()}, model
    versions = on_unit(host, f"ls -1 {posixpath.dirname(HF_HUB)}/.specfleet/versions/{model}").stdout.split()
    assert versions == [posixpath.basename(live()[0])] != [posixpath.basename(before[0])], versions
    third = playbook("prepare.yml", "-l", host, "--tags", "hf_cache")
    assert third.returncode == 0 and recap(third.stdout)[host]["changed"] == 0, changed_tasks(third.stdout)


def test_a_rebooted_unit_serves_its_decided_config_again_without_a_rollout(fleet_lab, decided):
    """The decided serving carries a restart policy: after a power cycle the unit's own dockerd
    starts it again, the same configuration, before (and without) any playbook run."""
    host = "agxorin-jp6-01"
    assert decided[host]["decision"] == "kept"
    inspect = "docker inspect --format '{{.HostConfig.RestartPolicy.Name}} {{.State.StartedAt}} " \
              "{{index .Config.Labels \"org.specfleet.config-hash\"}}' specfleet-vllm"
    policy, started, config = on_unit(host, inspect).stdout.split()
    assert policy == "unless-stopped"
    release = on_unit(host, "cat /var/lib/specfleet/release.json").stdout
    lab.reboot(fleet_lab, host)
    deadline = time.monotonic() + 300
    while unit_models(host).returncode != 0:
        assert time.monotonic() < deadline, f"{host} serves nothing after its reboot"
        time.sleep(3)
    policy_after, started_after, config_after = on_unit(host, inspect).stdout.split()
    assert started_after != started, "the serving container did not go through the reboot"
    assert (policy_after, config_after) == (policy, config)
    assert on_unit(host, "cat /var/lib/specfleet/release.json").stdout == release
    argv = json.loads(on_unit(host, "docker inspect --format '{{json .Config.Cmd}}' specfleet-vllm").stdout)
    current = json.loads(release)["current"]
    assert argv == serving.argv(current)[1:]


def test_a_precision_the_gpu_cannot_run_fails_classified_and_rolls_back(decided, tmp_path):
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
    assert unit_models(host).returncode == 0


def test_each_keys_canary_sweeps_the_draft_length_and_its_later_units_take_the_choice(fleet_lab, decided, tmp_path):
    """One key (AGX Orin, BF16 + EAGLE-3, JetPack 6 image), swept over k = 2 and 4: its canary
    measures both between its baseline blocks. The emulator's figures decide, its per-request
    noise off (SPECFLEET_EMULATOR_NOISE=0 in the servings' environment; with the servings side by
    side a later block's requests meet other noise than the first's, and a 9% loss over 8 prompts
    need not show beyond the 3% margin): k=2 1.64x code edits, 1.02x chat; k=4 1.91x code edits
    but 0.91x chat, a loss beyond the margin, so k=2 is kept and chosen; the key's other unit is
    planned with k=2 (not the class's 3) and kept on its own measurement; the report shows both.
    A second run changes nothing."""
    canary, later = "agxorin-jp6-01", "agxorin-jp6-02"
    lab.set_faults(fleet_lab, later, None)  # the module's OOM fault on the candidate, if it was set
    noiseless = {"specfleet_serve_extra_env": {"SPECFLEET_EMULATOR_NOISE": "0"}}
    settings = {"specfleet_spec_tokens_sweep": {"agx_orin": [2, 4]}, "specfleet_rollout_remeasure": True,
                **noiseless}
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
                     json.dumps({"specfleet_spec_tokens_sweep": {"agx_orin": [2, 4]}, **noiseless}),
                     env={"SPECFLEET_RUNS_DIR": str(tmp_path / "again")})
    assert again.returncode == 0, again.stdout[-4000:]
    assert {host: on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
            for host in (canary, later)} == started, again.stdout[-4000:]
    assert {host: recap(again.stdout)[host]["changed"] for host in (canary, later)} == {canary: 0, later: 0}, \
        changed_tasks(again.stdout)
    reused = {host: json.loads(next((tmp_path / "again").glob(f"*/units/{host}.json")).read_text())
              for host in (canary, later)}
    assert all(record["reused_from"] and record["num_speculative_tokens"] == 2 for record in reused.values())


def test_a_unit_that_loses_only_under_load_keeps_speculation_through_a_per_batch_size_table(fleet_lab, decided,
                                                                                            tmp_path):
    """A Thor on its default image, upstream vLLM 0.26.0 (its SpeculativeConfig takes
    num_speculative_tokens_per_batch_size; the lab's image of that name emulates 0.26.0), gated
    on code edits only, with the emulator's loaded_draft_slowdown fault (a step drafting for more
    than one sequence takes twice as long): EAGLE-3 k=5 wins at c=1 (1.69x noiseless) and loses
    at c=8 (about 0.75x), so the gate reverts for c=8 alone. The rollout then measures the
    candidate with speculation at batch 1 and none from 2 to 8, which serves c=8 as the baseline
    does: kept, served with its table, shown in the report; a re-run restarts nothing. The unit
    stays on its vetted table (the other tests here leave thor-02 alone)."""
    host = "thor-02"
    bands = [[1, 1, 5], [2, 8, 0]]
    settings = {"specfleet_gate_workloads": ["code_edit"]}
    pulled = playbook("prepare.yml", "-l", host, "--tags", "image", "-e", json.dumps(settings))
    assert pulled.returncode == 0, pulled.stdout[-4000:]
    lab.set_faults(fleet_lab, host, {"only_when_speculating": True, "loaded_draft_slowdown": 2.0})
    try:
        runs = tmp_path / "table"
        measure = json.dumps({**settings, "specfleet_rollout_remeasure": True})
        result = playbook("rollout.yml", "-l", host, "-e", measure, env={"SPECFLEET_RUNS_DIR": str(runs)})
        assert result.returncode == 0, result.stdout[-6000:]
        record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
        assert (record["decision"], record["batch_table"]) == ("kept", {"table": bands, "decision": "keep"}), \
            record["reasons"]
        (why,) = [reason for reason in record["reasons"] if reason.startswith("per-batch-size table")]
        assert why.startswith("per-batch-size table (k=5 at batch 1, off at batch 2-8) measured after code_edit: "
                              "throughput at c=8 -") and "regresses under load" in why, why
        release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
        current = release["current"]
        assert current == release["known_good"] and current["image"].endswith("/vllm/vllm-openai:v0.26.0")
        assert current["speculative_config"]["num_speculative_tokens_per_batch_size"] == bands
        args = json.loads(on_unit(host, "docker inspect -f '{{json .Args}}' specfleet-vllm").stdout)
        assert args == serving.argv(current)[1:]
        header = on_unit(host, "curl -si http://127.0.0.1:8000/health | grep -i '^server:'").stdout
        assert "vllm 0.26.0 emulated" in header, header
        (report_md,) = runs.glob("*/report.md")
        assert "| batch table |" in report_md.read_text() and "k=5 at batch 1, off at batch 2-8: keep" in \
            report_md.read_text()
        started = on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout
        again = playbook("rollout.yml", "-l", host, "-e", json.dumps(settings),
                         env={"SPECFLEET_RUNS_DIR": str(tmp_path / "again")})
        assert again.returncode == 0, again.stdout[-4000:]
        assert on_unit(host, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' specfleet-vllm").stdout == started
        reused = json.loads(next((tmp_path / "again").glob(f"*/units/{host}.json")).read_text())
        assert reused["reused_from"] and reused["batch_table"]["decision"] == "keep", reused["reasons"]
    finally:
        lab.set_faults(fleet_lab, host, None)


def test_a_table_whose_piecewise_graphs_cost_more_than_the_margin_at_c1_is_not_kept(fleet_lab, decided, tmp_path):
    """The same Thor and faults as above, and the emulator's piecewise_gap_us 250 (its default:
    12): its PIECEWISE CUDA graphs (what vLLM's V1 model runner falls back to with a table) lose
    a quarter of a millisecond at each layer's boundary, about -10% at c=1 against plain
    speculation and -12% at c=8 against the baseline (noiseless). The table is measured after
    the c=8 revert, compared with the baseline and at c=1 with the plain speculation it varies,
    and not kept: the unit serves its baseline, and the reasons give the table's cost both
    where speculation pays and under load. (The c=1 check deciding alone: test_rollout.py.)"""
    host = "thor-02"
    bands = [[1, 1, 5], [2, 8, 0]]
    settings = {"specfleet_gate_workloads": ["code_edit"], "specfleet_rollout_remeasure": True}
    lab.set_faults(fleet_lab, host, {"only_when_speculating": True, "loaded_draft_slowdown": 2.0,
                                     "piecewise_gap_us": 250})
    try:
        runs = tmp_path / "costly"
        result = playbook("rollout.yml", "-l", host, "-e", json.dumps(settings), env={"SPECFLEET_RUNS_DIR": str(runs)})
        assert result.returncode == 0, result.stdout[-6000:]
        record = json.loads(next(runs.glob(f"*/units/{host}.json")).read_text())
        assert (record["decision"], record["batch_table"]) == ("reverted", {"table": bands, "decision": "revert"}), \
            record["reasons"]
        # Its cost where speculation pays, against the plain speculation it varies: beyond the
        # margin (the lab's 8 prompts at c=1 leave its bounds wide; its k=0 band's cost at c=8
        # against the baseline fails the margin surely and reverts it at the first look).
        (cost,) = [reason for reason in record["reasons"] if "against plain speculation" in reason]
        assert cost.startswith("code_edit: throughput at c=1 against plain speculation -"), cost
        assert record["figures"]["code_edit"]["variant_change_c1"]["value"] < -0.03, cost
        assert record["measurement"]["deciding"].startswith("code_edit: throughput at c=8 -"), record["measurement"]
        release = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)
        assert release["current"] == release["known_good"] and release["current"]["kind"] == "baseline"
    finally:
        lab.set_faults(fleet_lab, host, None)


def test_a_unit_far_from_the_thresholds_decides_at_its_first_look_and_one_near_takes_more(decided, tmp_path):
    """The sequential gate looks after baseline, speculative, baseline and then after each more
    pair. AGX Orin's code-edit gain (about 1.7x, noiseless) is far above the 30% threshold: its
    first look keeps it. Put the threshold at the very gain it measured and no look can show it
    above or below: the gate measures pair after pair up to its budget and reverts as
    inconclusive. Measured again with the shipped threshold, the unit is kept at its first look
    once more (and serves its candidate, as the module's other tests expect)."""
    host = "agxorin-jp72-01"
    far = tmp_path / "far"
    result = playbook("rollout.yml", "-l", host, "-e", "specfleet_rollout_remeasure=true",
                      env={"SPECFLEET_RUNS_DIR": str(far)})
    assert result.returncode == 0, result.stdout[-4000:]
    record = json.loads(next(far.glob(f"*/units/{host}.json")).read_text())
    assert record["decision"] == "kept", record["reasons"]
    assert record["measurement"]["blocks"] == ["baseline", "speculative", "baseline"], record["measurement"]
    gain = record["figures"]["code_edit"]["throughput_gain_c1"]
    assert gain["lower"] > 0.30, gain

    near = tmp_path / "near"
    settings = {"specfleet_rollout_remeasure": True, "specfleet_gate_max_blocks": 7,
                "specfleet_gate_min_throughput_gain": round(gain["value"], 2)}
    result = playbook("rollout.yml", "-l", host, "-e", json.dumps(settings), env={"SPECFLEET_RUNS_DIR": str(near)})
    assert result.returncode == 0, result.stdout[-4000:]
    record = json.loads(next(near.glob(f"*/units/{host}.json")).read_text())
    measured = record["measurement"]
    assert (record["decision"], measured["inconclusive"]) == ("reverted", True), record["reasons"]
    assert measured["blocks"] == ["baseline", "speculative"] * 3 + ["baseline"], measured
    # Beside the baseline: the candidate started once, no block after it restarted anything.
    assert measured["started"] == [block == 1 for block in range(7)], measured

    again = tmp_path / "again"
    result = playbook("rollout.yml", "-l", host, "-e", "specfleet_rollout_remeasure=true",
                      env={"SPECFLEET_RUNS_DIR": str(again)})
    assert result.returncode == 0, result.stdout[-4000:]
    record = json.loads(next(again.glob(f"*/units/{host}.json")).read_text())
    assert (record["decision"], len(record["measurement"]["blocks"])) == ("kept", 3), record["reasons"]
