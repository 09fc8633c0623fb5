"""The fault matrix (issue 7, item 3) on the lab's EMULATED units, all in one site.yml run.

Each Jetson of the 9-unit mixed lab gets one fault, injected the way it happens on a real
unit (the emulator's fault switches only where a real vLLM fault cannot be provoked on CPU):

| unit            | fault                                          | expected                                   |
|-----------------|------------------------------------------------|--------------------------------------------|
| thor-01         | dockerd killed (-9) while the candidate starts | docker_unavailable, back on its known-good |
| thor-02         | tiktoken files missing on the controller       | refused in prepare, serving untouched      |
| agxorin-jp6-01  | health never ready                             | never_ready, back on its known-good (or,   |
|                 |                                                | when that fails too, the run's baseline)   |
| agxorin-jp6-02  | 10 % packet loss on its link during rsync      | rsync still completes, copy verified; its  |
|                 |                                                | key's canary (jp6-01) failed: not tried,   |
|                 |                                                | it serves its baseline                     |
| agxorin-jp72-01 | none (the control unit)                        | rolled out as usual                        |
| agxorin-jp72-02 | a truncated file in its live model cache       | copied again and switched in whole         |
| orinnx-01       | link down mid-rollout, back 90 s later         | reported unreachable; a re-run recovers it |
| orinnano-01     | wrong image tag                                | refused in prepare, serving untouched      |

For every unit: it ends serving a known-good config (its running container's config-hash label
and command line, not only its release record, say so), no cache is left half-replaced, the
report names the cause, and the other units are unaffected (the control unit's known-good and
running container are the same before and after). The out-of-memory, rejected
speculative config and mid-benchmark crash cases are in test_rollout_lab.py; disk full during
rsync and a gated model missing from the store in test_prepare_faults_lab.py.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT

from specfleet import serving
from tests.conftest import LAB_INVENTORY, lab_decision, lab_vars, on_unit, unit_models
from tests.conftest import lab_playbook as playbook

# ~15 min on a fresh lab (a first rollout of all 9 units, then the faulted one), less after
# the default lane's modules: `scripts/test --slow` runs it; CI does not (see pyproject.toml).
pytestmark = [pytest.mark.lab, pytest.mark.slow]

HOST_VARS_HEADER = "# Written by tests/integration/test_fault_matrix_lab.py for one run; removed after it.\n"
SERVING = LAYOUT["serving_container"]
TRIAL = LAYOUT["trial_container"]  # a candidate measured beside the baseline (Thor, AGX Orin 64GB)
RELEASE = "/var/lib/specfleet/release.json"
HASH_LABEL = LAYOUT["config_hash_label"]
HF_HUB = "/var/lib/specfleet/huggingface/hub"
LINK_DOWN_S = 90
# 10 % of the unit's packets dropped each way. `tc netem` is what one would use, but this
# host's kernel has no sch_netem ("Specified qdisc kind is unknown"), so the same random
# loss comes from the unit's own netfilter (statistic match), in the unit's namespace only.
LOSS_ON = ("iptables -N SPECFLEET-LOSS && iptables -A SPECFLEET-LOSS -m statistic --mode random "
           "--probability 0.10 -j DROP && iptables -I INPUT -i eth0 -j SPECFLEET-LOSS && "
           "iptables -I OUTPUT -o eth0 -j SPECFLEET-LOSS")
LOSS_OFF = ("iptables -D INPUT -i eth0 -j SPECFLEET-LOSS; iptables -D OUTPUT -o eth0 -j SPECFLEET-LOSS; "
            "iptables -F SPECFLEET-LOSS; iptables -X SPECFLEET-LOSS; true")
# Emulated seconds of extra start-up for a speculative server (x the lab's time scale 0.05:
# 20 s), the window in which dockerd is killed or the link taken down.
SLOW_START = {"only_when_speculating": True, "startup_delay_s": 400}

EMULATOR_FAULTS = {
    "thor-01": SLOW_START,
    "orinnx-01": SLOW_START,
    "agxorin-jp6-01": {"only_when_speculating": True, "never_ready": True},
}
# The launch-fault units measure afresh (an earlier run may have decided their candidates);
# the others reuse their decisions, as an unchanged unit does on a re-run.
REMEASURE = {"specfleet_rollout_remeasure": True}
HOST_VARS = {
    "thor-01": REMEASURE,
    "orinnx-01": REMEASURE,
    # The run must not wait 15 minutes for a server that never answers.
    "agxorin-jp6-01": {**REMEASURE, "specfleet_serve_ready_timeout": 45},
}
CONTROL = "agxorin-jp72-01"
# Every unit of the test lab; spark-01 gets no fault (the Spark's are in test_rollout_lab.py).
HOSTS = ("thor-01", "thor-02", "agxorin-jp6-01", "agxorin-jp6-02", "agxorin-jp72-01", "agxorin-jp72-02",
         "orinnx-01", "orinnano-01", "spark-01")


def ok(host: str, command: str, timeout: float = 120) -> str:
    result = on_unit(host, command, timeout=timeout)
    assert result.returncode == 0, f"{host}: {command}: {result.stderr[-2000:]}"
    return result.stdout


def answers_ssh(host: str) -> bool:
    """Whether the unit answers over SSH now. While its link is down ssh neither connects nor
    fails (the packets go nowhere), so a probe that outlasts its timeout is a no."""
    try:
        return on_unit(host, "true", timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def serving_id(host: str) -> str:
    return ok(host, f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' {SERVING} 2>/dev/null || true").strip()


def running_serving(host: str) -> dict:
    """The serving container as the unit's own dockerd runs it, not as its release record says:
    vllm_container's config-hash label, its image and arguments (after the entrypoint), its state."""
    (container,) = json.loads(ok(host, f"docker inspect {SERVING}"))
    return {"config_hash": (container["Config"]["Labels"] or {}).get(HASH_LABEL), "image": container["Config"]["Image"],
            "args": container["Args"], "status": container["State"]["Status"]}


def assert_serves_known_good(host: str, release: dict, before: dict | None = None) -> dict:
    """The unit's running container is its record's known-good: the same command line (the one
    rendering, specfleet.serving.argv), running; and, when ``before`` (the known-good and the
    container the unit served before the fault) is that same known-good, the same config hash."""
    running = running_serving(host)
    known_good = release["known_good"]
    assert running["status"] == "running", running
    assert (running["image"], running["args"]) == (known_good["image"], serving.argv(known_good)[1:]), (
        f"{host} does not run its known-good {known_good['kind']} serving: {running['args']}")
    if before is not None and before["release"]["known_good"]["spec_id"] == known_good["spec_id"]:
        assert running["config_hash"] == before["serving"]["config_hash"], (running, before["serving"])
    return running


def served_model(host: str) -> str:
    models = unit_models(host)
    assert models.returncode == 0, f"{host}: GET /v1/models: {models.stderr[-2000:]}"
    return models.stdout


def wrong_image_tag(host: str) -> str:
    # The image the unit's plan uses, with a tag the mirror does not hold.
    return json.loads(ok(host, f"cat {RELEASE}"))["known_good"]["image"].rsplit(":", 1)[0] + ":no-such-tag"


def when_candidate_starts(host: str, action: str, stop: threading.Event, done: dict) -> None:
    """Run `action` on the unit as soon as the rollout has started its speculative candidate:
    a serving container other than the one running now (which may be a kept candidate), or
    the trial container beside it."""
    def inspect(name: str) -> str:
        return on_unit(host, f"docker inspect -f '{{{{.Id}}}} {{{{json .Args}}}}' {name} 2>/dev/null",
                       timeout=20).stdout

    initial = inspect(SERVING).split(" ", 1)[0]
    deadline = time.monotonic() + 1500
    while not stop.is_set() and time.monotonic() < deadline:
        for name in (SERVING, TRIAL):
            container, _, args = inspect(name).partition(" ")
            if container and container != initial and "--speculative-config" in args:
                done[host] = on_unit(host, action, timeout=20).returncode == 0
                return
        time.sleep(0.5)


def write_host_vars(host: str, values: dict) -> Path:
    path = LAB_INVENTORY / "host_vars" / f"{host}.yml"
    assert not path.exists(), f"{path} exists (a real-engine pin?); the fault matrix needs the unit as `lab up` left it"
    path.parent.mkdir(exist_ok=True)
    path.write_text(HOST_VARS_HEADER + json.dumps(values, indent=1) + "\n")
    return path


def hub_repo(model: str) -> str:
    return f"{HF_HUB}/models--{model.replace('/', '--')}"


def clear_faults() -> None:
    for host in HOSTS:
        on_unit(host, "rm -f /etc/specfleet-lab/faults.json")


@pytest.fixture(scope="module")
def known_good(fleet_lab):
    """Every unit prepared and rolled out without faults first: each has a known-good
    (earlier modules' fault switches cleared). After the default lane's modules (the suite
    runs slow lanes last) it measures only the units whose
    candidate an earlier module's fault made fail. Per unit: its release record and the
    serving container it runs then (its known-good, config hash included)."""
    clear_faults()
    result = playbook("site.yml")
    assert result.returncode == 0, result.stdout[-6000:]
    # A candidate that failed under an earlier module's fault switch stays failed on a
    # re-run (as it should); measured again here without the switch, every unit enters
    # the matrix with a decision that no other fault made.
    releases = {host: json.loads(ok(host, f"cat {RELEASE}")) for host in HOSTS}
    failed = [host for host, release in releases.items()
              if any(entry["decision"] == "failed" for entry in release["decisions"].values())]
    if failed:
        again = playbook("rollout.yml", "-l", ",".join(failed), "-e",
                         '{"specfleet_rollout_remeasure": true}')
        assert again.returncode == 0, again.stdout[-6000:]
        releases.update({host: json.loads(ok(host, f"cat {RELEASE}")) for host in failed})
    before = {}
    for host, release in releases.items():
        assert release["current"] == release["known_good"] and "trial" not in release, (host, release)
        before[host] = {"release": release, "serving": assert_serves_known_good(host, release)}
    return before


@pytest.fixture(scope="module")
def faulted(known_good, tmp_path_factory):
    written: list[Path] = []
    stop = threading.Event()
    try:
        # thor-02 serves gpt-oss (it needs the encodings) from a controller folder without them.
        no_encodings = tmp_path_factory.mktemp("tiktoken-missing")
        per_host = {**HOST_VARS,
                    "thor-02": {"specfleet_model": "openai/gpt-oss-120b",
                                "specfleet_tiktoken_source_dir": str(no_encodings)},
                    "orinnano-01": {"specfleet_image_ref": wrong_image_tag("orinnano-01")}}
        for host, values in per_host.items():
            written.append(write_host_vars(host, values))
        for host, faults in EMULATOR_FAULTS.items():
            ok(host, f"echo {shlex.quote(json.dumps(faults))} > /etc/specfleet-lab/faults.json")
        # A live file cut short (an interrupted copy) in agxorin-jp72-02's model cache.
        truncated = ok("agxorin-jp72-02", f"f=$(find -L {HF_HUB}/models--*/snapshots -type f -size +1k | head -1); "
                                          "truncate -s 100 \"$f\"; echo \"$f\"").strip()
        # agxorin-jp6-02 copies its models again, over a lossy link.
        ok("agxorin-jp6-02", f"rm -rf {HF_HUB}/models--* && {LOSS_ON}")
        before = {host: serving_id(host) for host in ("thor-02", "orinnano-01")}

        done: dict[str, bool] = {}
        watchers = [
            threading.Thread(target=when_candidate_starts, daemon=True, args=(
                "thor-01", "kill -9 $(cat /var/run/docker.pid)", stop, done)),
            threading.Thread(target=when_candidate_starts, daemon=True, args=(
                "orinnx-01", f"nohup sh -c 'ip link set eth0 down; sleep {LINK_DOWN_S}; ip link set eth0 up' "
                             ">/dev/null 2>&1 &", stop, done)),
        ]
        for watcher in watchers:
            watcher.start()
        runs = tmp_path_factory.mktemp("runs")
        result = playbook("site.yml", env={"SPECFLEET_RUNS_DIR": str(runs)})
        stop.set()
        run_dir = next(runs.iterdir())
        yield {
            "result": result,
            "records": {path.stem: json.loads(path.read_text()) for path in (run_dir / "units").glob("*.json")},
            "report": json.loads((run_dir / "report.json").read_text()),
            "injected": done,
            "truncated": truncated,
            "before": before,
        }
    finally:
        stop.set()
        for path in written:
            path.unlink(missing_ok=True)
        clear_faults()
        on_unit("agxorin-jp6-02", LOSS_OFF)
        # Leave agxorin-jp6-01 as the next module expects it, decided without faults (its
        # never_ready is remembered for the candidate, as a candidate's own failure should be).
        playbook("rollout.yml", "-l", "agxorin-jp6-01", "-e", "specfleet_rollout_remeasure=true")


def test_faults_were_injected_during_the_launch(faulted):
    assert faulted["injected"] == {"thor-01": True, "orinnx-01": True}, faulted["result"].stdout[-3000:]


def test_every_unit_is_in_the_report(faulted):
    assert {unit["host"] for unit in faulted["report"]["units"]} == set(HOSTS), faulted["result"].stdout[-4000:]


@pytest.mark.parametrize(("host", "failure_class"), [
    ("thor-01", "docker_unavailable"),
    ("agxorin-jp6-01", "never_ready"),
])
def test_launch_faults_end_on_the_known_good(faulted, known_good, host, failure_class):
    record = faulted["records"][host]
    assert record["decision"] == "failed", record["reasons"]
    assert record["failure"]["failure_class"] == failure_class, record["reasons"]
    release = json.loads(ok(host, f"cat {RELEASE}"))
    assert release["current"] == release["known_good"], release
    assert record["serving"] == release["known_good"]["kind"], record["reasons"]
    assert "trial" not in release, release
    # Not only the record: the container the unit runs is its known-good (the same config hash as
    # before the fault when the known-good is the same serving).
    assert_serves_known_good(host, release, known_good[host])
    # A known-good that is an earlier kept candidate hits the same fault when it starts
    # again (the switch applies to any speculative server): then the unit serves the
    # baseline it served and measured in this run.
    rollback = record["reasons"][1]
    if release["known_good"]["kind"] == "baseline" and "did not start again" in rollback:
        assert "serving this run's measured baseline" in rollback
    else:
        assert rollback.startswith("rolled back to the known-good"), rollback
    assert '"object":"list"' in served_model(host).replace(" ", "")


def test_dockerd_came_back_and_serves_only_the_known_good(faulted):
    containers = ok("thor-01", "docker ps --format '{{.Names}} {{.Status}}'").splitlines()
    assert [line.split()[0] for line in containers] == [SERVING], containers


@pytest.mark.parametrize(("host", "cause"), [
    ("thor-02", "tiktoken"),
    ("orinnano-01", "no-such-tag"),
])
def test_prepare_refusals_leave_the_serving_untouched(faulted, known_good, host, cause):
    record = faulted["records"][host]
    assert record["decision"] == "failed" and record["serving"] == "unchanged", record
    assert cause in record["reasons"][0], record["reasons"]
    assert serving_id(host) == faulted["before"][host], "the unit's serving container was restarted"
    assert json.loads(ok(host, f"cat {RELEASE}"))["current"] == known_good[host]["release"]["current"]
    assert running_serving(host)["config_hash"] == known_good[host]["serving"]["config_hash"]


def test_control_unit_is_unaffected(faulted, known_good):
    record = faulted["records"][CONTROL]
    assert record["decision"] == lab_decision(CONTROL), record["reasons"]
    # Its known-good, and the container it runs, are the ones it had before the faulted run.
    release = json.loads(ok(CONTROL, f"cat {RELEASE}"))
    assert release["known_good"] == known_good[CONTROL]["release"]["known_good"]
    assert release["current"] == release["known_good"] and "trial" not in release, release
    running = assert_serves_known_good(CONTROL, release, known_good[CONTROL])
    assert running["config_hash"] == known_good[CONTROL]["serving"]["config_hash"]


def test_lossy_link_copy_is_complete(faulted):
    record = faulted["records"]["agxorin-jp6-02"]
    # Its key's canary failed with its candidate (never ready): the candidate is not tried here.
    assert record["decision"] == "reverted", record["reasons"]
    assert any(reason.startswith("not tried here: agxorin-jp6-01, the canary of this unit's key, failed (Start the "
                                 "spec and wait until it serves: never_ready") for reason in record["reasons"]), \
        record["reasons"]
    verify_live_caches("agxorin-jp6-02")


def test_truncated_cache_file_was_replaced_whole(faulted):
    record = faulted["records"]["agxorin-jp72-02"]
    assert record["decision"] == lab_decision("agxorin-jp72-02"), record["reasons"]
    size = int(ok("agxorin-jp72-02", f"stat -L -c %s {shlex.quote(faulted['truncated'])}"))
    assert size > 100
    verify_live_caches("agxorin-jp72-02")


def verify_live_caches(host: str) -> None:
    """Every live model on the unit is its controller manifest, byte for byte: each file,
    each snapshot link resolving to the right blob, nothing more (no half-replaced tree)."""
    store = Path(lab_vars()["specfleet_hf_cache_store"])
    listing = ok(host, f"cd {HF_HUB} && for d in models--*; do "
                       "(cd \"$d\" && find -L . -type f -exec sha256sum {} +) | sed \"s|^|$d |\"; done")
    live: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        repo_dir, digest, path = line.split(maxsplit=2)
        live.setdefault(repo_dir, {})[path.removeprefix("./")] = digest
    assert live, f"{host} has no models"
    for repo_dir, files in live.items():
        manifest = json.loads((store / "manifests" / f"{repo_dir}.json").read_text())
        expected = {path: entry["sha256"] for path, entry in manifest["files"].items()}
        for link, target in manifest["symlinks"].items():
            blob = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
            expected[link] = manifest["files"][blob]["sha256"]
        assert files == expected, f"{host}: {repo_dir} differs from its manifest"


def test_unreachable_unit_is_reported_and_recovers(faulted, known_good, tmp_path):
    host = "orinnx-01"
    record = faulted["records"][host]
    assert record["decision"] == "failed" and record["failure"]["failure_class"] == "unreachable", record
    assert f"rollout.yml -l {host}" in " ".join(record["reasons"])
    # Back later: the link returns by itself; the re-run the report asks for recovers the unit.
    deadline = time.monotonic() + LINK_DOWN_S + 60
    while not answers_ssh(host):
        assert time.monotonic() < deadline, f"{host} did not come back"
        time.sleep(3)
    # What the lost run left: its candidate started (the link went down then), unvetted, while the
    # record still says the baseline serves; the trial marker names that candidate.
    left = json.loads(ok(host, f"cat {RELEASE}"))
    assert left["trial"]["kind"] == "speculative" and left["current"]["kind"] == "baseline", left
    assert "--speculative-config" in running_serving(host)["args"]
    again = playbook("rollout.yml", "-l", host, env={"SPECFLEET_RUNS_DIR": str(tmp_path)})
    assert again.returncode == 0, again.stdout[-4000:]
    rerun = json.loads(next(tmp_path.glob(f"*/units/{host}.json")).read_text())
    (interrupted,) = [reason for reason in rerun["reasons"]
                      if reason.startswith("the previous run was interrupted during the trial of")]
    assert f"serving {left['trial']['spec_id'][:8]}" in interrupted and "rolled back to the known-good" in interrupted
    release = json.loads(ok(host, f"cat {RELEASE}"))
    decided = [decision["decision"] for decision in release["decisions"].values()]
    assert decided and decided[-1] == lab_decision(host)
    assert release["current"] == release["known_good"] and release["current"]["kind"] == "baseline"
    assert "trial" not in release, release
    # Not left on the unvetted speculative serving: the container runs the known-good baseline,
    # the same configuration (config hash) it served before the faulted run.
    running = assert_serves_known_good(host, release, known_good[host])
    assert "--speculative-config" not in running["args"]
    assert running["config_hash"] == known_good[host]["serving"]["config_hash"]
    assert '"object":"list"' in served_model(host).replace(" ", "")
