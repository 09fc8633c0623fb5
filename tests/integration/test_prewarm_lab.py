"""Compile-cache pre-warm on the lab's EMULATED units (real Ansible, SSH, Docker, rsync).

Five units, three plan groups: thor-02 alone; agxorin-jp6-01/-02 (the JetPack 6 image);
agxorin-jp72-01/-02 (the JetPack 7.2 image). The event manifest names Qwen/Qwen3-0.6B, so each
unit warms four servings: its plan's candidate, the baseline the rollout measures against, and
the event model's baseline and speculative serving; twelve keys in all. Before the run thor-02
and agxorin-jp6-01 serve, so thor-02 compiles its four keys one after another and restores its
serving once, after the last; the JetPack 6 keys go to the idle agxorin-jp6-02, the JetPack 7.2
keys two by two to both idle units.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter

import pytest

from specfleet import prewarm
from tests.bench.prewarm_start import emulator_start, module, on_unit, plans, serve_params
from tests.conftest import REPO, lab_playbook, recap, unit_models

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.ci]  # ~7 min: CI runs it, `scripts/test --slow` here

INVENTORY = REPO / "inventory" / "lab"
UNITS = ["thor-02", "agxorin-jp6-01", "agxorin-jp6-02", "agxorin-jp72-01", "agxorin-jp72-02"]
LIMIT = ",".join(UNITS)
SERVING = ["thor-02", "agxorin-jp6-01"]
CACHE = "/var/lib/specfleet/vllm-cache"
# The event manifest (prepare stages the model, prewarm compiles its servings); the lab's
# stand-in catalog holds it.
EVENT_MODEL = "Qwen/Qwen3-0.6B"
EVENT = {"specfleet_event_models": [EVENT_MODEL]}
KEY_LABEL = "org.specfleet.compile-cache-key"

READ_LIVE = r"""
import glob, json, os
out = {}
for marker in glob.glob("/var/lib/specfleet/vllm-cache/torch_compile_cache/*/specfleet-compile-cache.json"):
    entry = os.path.dirname(marker)
    out[os.path.basename(entry)] = {"marker": json.load(open(marker)),
                                    "version": os.path.basename(os.path.realpath(entry)),
                                    "link": os.readlink(entry) if os.path.islink(entry) else None}
print(json.dumps(out))
"""


def playbook(name: str, *extra: str) -> subprocess.CompletedProcess:
    return lab_playbook(name, "-l", LIMIT, "-e", json.dumps(EVENT), *extra)


def live(host: str) -> dict[str, dict]:
    proc = on_unit(host, f"python3 -c '{READ_LIVE}'")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def container_state(host: str, name: str) -> str:
    return on_unit(host, f"docker inspect -f '{{{{.Id}}}} {{{{.State.Running}}}}' {name} 2>/dev/null").stdout.strip()


def container_events(host: str, since: float, until: float) -> list[tuple[str, str, str | None]]:
    """(container name, action, compile-cache key label) of the unit's container events, in order."""
    proc = on_unit(host, f"docker events --since {since:.0f} --until {until:.0f} --filter type=container "
                         "--format '{{json .}}'")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return [(e["Actor"]["Attributes"].get("name"), e["Action"], e["Actor"]["Attributes"].get(KEY_LABEL))
            for e in events]


@pytest.fixture(scope="module")
def lab_plans(fleet_lab, tmp_path_factory) -> dict[str, dict]:
    prepared = playbook("prepare.yml")
    assert prepared.returncode == 0, prepared.stdout[-4000:]
    policy = tmp_path_factory.mktemp("policy") / "event.json"  # JSON is YAML
    policy.write_text(json.dumps(EVENT))
    return plans("--policy", str(policy))


@pytest.fixture(scope="module")
def keys(lab_plans) -> dict[str, dict[str, list[str]]]:
    """Host -> the keys of its servings, by kind (plan, baseline, event)."""
    return {host: {kind: [s["key"] for s in prewarm.unit_servings(lab_plans[host], [kind])]
                   for kind in prewarm.SOURCES} for host in UNITS}


@pytest.fixture(scope="module")
def prewarmed(lab_plans, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    for host in UNITS:  # no compile cache, nothing serving but what the test starts
        on_unit(host, f"docker rm -f specfleet-vllm specfleet-prewarm >/dev/null 2>&1; rm -rf {CACHE}")
        # As the toolkit does before every start: the (emulated) page cache of the models prepare
        # copied and earlier runs read counts as used memory on unified memory.
        on_unit(host, "sync && sysctl -w vm.drop_caches=3 >/dev/null")
    serving = {}
    for host in SERVING:  # serving the baseline, its cache in the unit's cache dir
        params = serve_params(lab_plans[host]["baseline_serving"], f"{CACHE}:/root/.cache/vllm",
                              name="specfleet-vllm", port=8000)
        started = module(host, "specfleet.fleet.vllm_container", params)
        assert started.get("ready"), started
        serving[host] = container_state(host, "specfleet-vllm")

    started = time.time()
    check = playbook("prewarm.yml", "--check", "-e", f"specfleet_compile_cache_store={store}")
    after_check = {host: {"live": live(host), "golden": container_state(host, "specfleet-prewarm")}
                   for host in UNITS}
    store_after_check = sorted(p.name for p in store.iterdir())
    since = time.time()
    first = playbook("prewarm.yml", "-e", f"specfleet_compile_cache_store={store}")
    until = time.time()
    events = {host: container_events(host, since - 1, until + 1) for host in UNITS}
    second = playbook("prewarm.yml", "-e", f"specfleet_compile_cache_store={store}")
    print(f"\nprewarm.yml on {len(UNITS)} units: check {since - started:.0f} s, first {until - since:.0f} s, "
          f"second {time.time() - until:.0f} s")
    return {"store": store, "check": check, "after_check": after_check,
            "store_after_check": store_after_check, "first": first, "second": second,
            "serving_before": serving, "events": events}


def test_check_mode_changes_nothing(prewarmed, keys):
    check = prewarmed["check"]
    assert check.returncode == 0, check.stdout[-4000:]
    assert prewarmed["store_after_check"] == []
    # No pre-warmed cache on any unit (the serving baselines' own caches carry no marker),
    # no golden container.
    assert prewarmed["after_check"] == dict.fromkeys(UNITS, {"live": {}, "golden": ""})
    # It says what it would compile: every key once.
    every_key = {key for host in UNITS for kind in keys[host].values() for key in kind}
    said = re.findall(r"would start \S+ here .*? compile cache of (\S+)", " ".join(check.stdout.split()))
    assert sorted(said) == sorted(every_key), said


def test_every_unit_holds_the_cache_of_every_serving_it_runs(prewarmed, keys):
    first = prewarmed["first"]
    assert first.returncode == 0, first.stdout[-6000:]
    plan_groups = {host: keys[host]["plan"][0] for host in UNITS}
    assert len(set(plan_groups.values())) == 3
    entries = {}
    for host in UNITS:
        wanted = [key for kind in prewarm.SOURCES for key in keys[host][kind]]
        # candidate, baseline, the event model's baseline and speculative serving: four keys
        assert len(set(wanted)) == 4, keys[host]
        held = live(host)
        # Read on the unit: one entry per key, each marker naming one of the unit's own keys.
        by_key = {entry["marker"]["key"]: (name, entry["version"]) for name, entry in held.items()}
        assert sorted(by_key) == sorted(wanted), (host, sorted(held))
        assert len(held) == len(wanted)
        for entry in held.values():
            assert entry["link"] and not entry["link"].startswith("/"), entry  # versioned, relative
        entries[host] = by_key
    # Units of a key got the same cache (name and version); different keys, different ones (two
    # keys may name the same vLLM hash, the JetPack 6 and 7.2 images do in the emulator, but the
    # marker naming the key makes their versions differ).
    for a in UNITS:
        for b in UNITS:
            for key in entries[a]:
                if key in entries[b]:
                    assert entries[a][key] == entries[b][key], (a, b, key)
                else:
                    assert entries[a][key] not in entries[b].values(), (a, b, key)
    # The summary says it per key, one line each (the YAML callback folds long lines).
    summary = first.stdout.split("TASK [Summarise the unit's compile cache]")[1]
    thor = " ".join(summary.split("ok: [thor-02] =>")[1].split("ok: [")[0].split())
    lines = re.findall(r"- '(.*?)'", thor)
    assert len(lines) == 4, thor
    assert lines[0].startswith(f"{keys['thor-02']['plan'][0]} (plan: nvidia/Llama-3.1-8B-Instruct-FP4 + eagle3): "
                               "golden, entries "), lines
    assert lines[1].startswith(f"{keys['thor-02']['baseline'][0]} (baseline: nvidia/Llama-3.1-8B-Instruct-FP4): "
                               "golden, entries "), lines


def test_golden_units_and_restored_serving(prewarmed, keys):
    store = prewarmed["store"]
    golden = {}
    for host in UNITS:
        for key in {key for kind in keys[host].values() for key in kind}:
            golden[key] = json.loads((store / "compile-cache" / key / "key.json").read_text())["golden"]
            assert prewarm.inspect_store(store, key)["present"]
    assert len(golden) == 12
    # thor-02 alone: its four keys; the JetPack 6 keys on the idle unit only; the JetPack 7.2
    # keys shared by its two idle units (their golden runs side by side).
    assert Counter(golden.values()) == {"thor-02": 4, "agxorin-jp6-02": 4, "agxorin-jp72-01": 2, "agxorin-jp72-02": 2}
    for host in UNITS:
        for key in keys[host]["baseline"] + keys[host]["plan"]:
            assert golden[key].rsplit("-", 1)[0] == host.rsplit("-", 1)[0], (host, key)
    # Each key compiled once, by one golden container, in the whole fleet.
    compiled = Counter(key for host in UNITS for name, action, key in prewarmed["events"][host]
                       if name == "specfleet-prewarm" and action == "start")
    assert compiled == dict.fromkeys(golden, 1), compiled
    # thor-02's serving stopped once for its four golden runs and started once, after the last;
    # agxorin-jp6-01's was not touched.
    thor = [(name, action) for name, action, _ in prewarmed["events"]["thor-02"] if action in ("start", "stop")]
    assert thor == [("specfleet-vllm", "stop")] + [("specfleet-prewarm", "start"), ("specfleet-prewarm", "stop")] * 4 \
        + [("specfleet-vllm", "start")], thor
    assert not [event for event in prewarmed["events"]["agxorin-jp6-01"] if event[0] == "specfleet-vllm"]
    for host in SERVING:  # the same container, running again, serving
        assert container_state(host, "specfleet-vllm") == prewarmed["serving_before"][host]
        assert unit_models(host).returncode == 0, host
    for host in UNITS:
        assert container_state(host, "specfleet-prewarm") == "", host


def test_the_event_models_keys_compiled_once_and_fanned_out(prewarmed, keys, lab_plans):
    store = prewarmed["store"]
    units_of = {}
    for host in UNITS:
        assert {s["model"] for s in lab_plans[host]["event"]["servings"]} == {EVENT_MODEL}
        for key in keys[host]["event"]:
            units_of.setdefault(key, []).append(host)
    assert len(units_of) == 6  # baseline and speculative, on three device class/image groups
    for key, hosts in units_of.items():
        record = json.loads((store / "compile-cache" / key / "key.json").read_text())
        assert record["factors"]["args"]["model"] == EVENT_MODEL
        assert record["golden"] in hosts
        # Every unit of the key holds the golden unit's entry, the same version.
        held = {host: {(name, entry["version"]) for name, entry in live(host).items()
                       if entry["marker"]["key"] == key} for host in hosts}
        assert len({frozenset(v) for v in held.values()}) == 1 and all(held.values()), (key, held)
    # The JetPack 6 event keys reached agxorin-jp6-01 by fan-out (its serving kept running).
    received = fanout_output(prewarmed["first"].stdout)
    for key in keys["agxorin-jp6-01"]["event"]:
        assert re.search(rf"{re.escape(key)}: \S+ -> agxorin-jp6-01,agxorin-jp6-02", received), received


def fanout_output(stdout: str) -> str:
    """What the compile-cache role's fan-out task printed: the task the role includes from
    specfleet_fanout (its loop labels name each entry's units)."""
    return stdout.split("Fan each entry out")[1].split("Fan each payload out")[1].split("TASK [")[0]


def test_second_run_starts_and_copies_nothing(prewarmed):
    second = prewarmed["second"]
    assert second.returncode == 0, second.stdout[-4000:]
    counters = recap(second.stdout)
    assert {host: counters[host]["changed"] for host in UNITS} == dict.fromkeys(UNITS, 0)
    assert "golden.yml" not in second.stdout
    fanout = fanout_output(second.stdout)
    assert "changed:" not in fanout and "ok:" not in fanout, fanout


def test_warm_cache_starts_faster(prewarmed, lab_plans, keys):
    host = "agxorin-jp72-02"  # holds its candidate's cache (one of the two units of that key)
    (name,) = [name for name, entry in live(host).items() if entry["marker"]["key"] == keys[host]["plan"][0]]
    cold_root = "/var/lib/specfleet/prewarm-test-cold"
    on_unit(host, f"rm -rf {cold_root} && mkdir -p {cold_root}")
    try:
        cold = emulator_start(host, lab_plans[host], f"{cold_root}:/root/.cache/vllm", name="specfleet-prewarm-test")
        warm = emulator_start(host, lab_plans[host], f"{CACHE}:/root/.cache/vllm:ro", name="specfleet-prewarm-test")
    finally:
        on_unit(host, f"rm -rf {cold_root}")
    print(f"\nemulator start on {host}: cold {cold['startup_seconds']} s, pre-warmed {warm['startup_seconds']} s "
          f"(log: torch.compile {cold['log_compile_s']} -> {warm['log_compile_s']} emulated s)")
    assert cold["compiled"] and not cold["hit"]
    assert warm["hit"] and not warm["compiled"]
    assert warm["cache_dir"] == f"/root/.cache/vllm/torch_compile_cache/{name}/rank_0_0"
    # The emulator's own modelled figures (deterministic); the wall time is reported above.
    assert warm["log_compile_s"] < cold["log_compile_s"]
    assert warm["log_init_engine_s"] < cold["log_init_engine_s"]
