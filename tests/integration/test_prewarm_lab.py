"""Compile-cache pre-warm on the lab's EMULATED units (real Ansible, SSH, Docker, rsync).

Five units, three keys: thor-02 alone; agxorin-jp6-01/-02 (the JetPack 6 image);
agxorin-jp72-01/-02 (the JetPack 7.2 image). Before the run thor-02 and agxorin-jp6-01
serve, so thor-02's golden run must stop and restore its serving, and the JetPack 6 key
must choose the idle agxorin-jp6-02 as its golden unit.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specfleet import prewarm
from tests.bench.prewarm_start import emulator_start, module, on_unit, plans, serve_params
from tests.conftest import REPO

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.ci]  # ~5 min: CI runs it, `scripts/test --slow` here

INVENTORY = REPO / "inventory" / "lab"
UNITS = ["thor-02", "agxorin-jp6-01", "agxorin-jp6-02", "agxorin-jp72-01", "agxorin-jp72-02"]
LIMIT = ",".join(UNITS)
SERVING = ["thor-02", "agxorin-jp6-01"]
CACHE = "/var/lib/specfleet/vllm-cache"

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
    binary = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run([str(binary), "-i", str(INVENTORY), f"playbooks/{name}", "-l", LIMIT, *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


def recap(output: str) -> dict[str, dict[str, int]]:
    counters = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE):
        counters[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", fields)}
    return counters


def live(host: str) -> dict[str, dict]:
    proc = on_unit(host, f"python3 -c '{READ_LIVE}'")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def container_state(host: str, name: str) -> str:
    return on_unit(host, f"docker inspect -f '{{{{.Id}}}} {{{{.State.Running}}}}' {name} 2>/dev/null").stdout.strip()


@pytest.fixture(scope="module")
def lab_plans(fleet_lab) -> dict[str, dict]:
    prepared = playbook("prepare.yml")
    assert prepared.returncode == 0, prepared.stdout[-4000:]
    return plans()


@pytest.fixture(scope="module")
def prewarmed(lab_plans, tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    for host in UNITS:  # no compile cache, nothing serving but what the test starts
        on_unit(host, f"docker rm -f specfleet-vllm specfleet-prewarm >/dev/null 2>&1; rm -rf {CACHE}")
    serving = {}
    for host in SERVING:  # serving the baseline, its cache in the unit's cache dir
        params = serve_params(lab_plans[host]["baseline_serving"], f"{CACHE}:/root/.cache/vllm",
                              name="specfleet-vllm", port=8000)
        started = module(host, "specfleet.fleet.vllm_container", params)
        assert started.get("ready"), started
        serving[host] = container_state(host, "specfleet-vllm")

    check = playbook("prewarm.yml", "--check", "-e", f"specfleet_compile_cache_store={store}")
    after_check = {host: {"live": live(host), "golden": container_state(host, "specfleet-prewarm")}
                   for host in UNITS}
    store_after_check = sorted(p.name for p in store.iterdir())
    first = playbook("prewarm.yml", "-e", f"specfleet_compile_cache_store={store}")
    second = playbook("prewarm.yml", "-e", f"specfleet_compile_cache_store={store}")
    return {"store": store, "check": check, "after_check": after_check,
            "store_after_check": store_after_check, "first": first, "second": second,
            "serving_before": serving}


def test_check_mode_changes_nothing(prewarmed):
    check = prewarmed["check"]
    assert check.returncode == 0, check.stdout[-4000:]
    assert prewarmed["store_after_check"] == []
    # No pre-warmed cache on any unit (the serving baselines' own caches carry no marker),
    # no golden container.
    assert prewarmed["after_check"] == dict.fromkeys(UNITS, {"live": {}, "golden": ""})
    assert "would start" in check.stdout


def test_every_unit_holds_its_own_keys_cache(prewarmed, lab_plans):
    first = prewarmed["first"]
    assert first.returncode == 0, first.stdout[-6000:]
    keys = {host: prewarm.plan_key(lab_plans[host]) for host in UNITS}
    assert len(set(keys.values())) == 3
    entries = {}
    for host in UNITS:
        held = live(host)
        assert held, f"{host} holds no pre-warmed cache"
        for name, entry in held.items():
            # Read on the unit: the marker names the unit's own key, nothing else.
            assert entry["marker"]["key"] == keys[host], (host, entry["marker"])
            assert entry["link"] and not entry["link"].startswith("/"), entry  # versioned, relative
            entries[host] = (name, entry["version"])
    # Units of a key got the same cache; units of different keys different ones.
    for a in UNITS:
        for b in UNITS:
            assert (entries[a] == entries[b]) == (keys[a] == keys[b]), (a, b, entries)


def test_golden_units_and_restored_serving(prewarmed, lab_plans):
    store = prewarmed["store"]
    golden = {}
    for host in UNITS:
        key = prewarm.plan_key(lab_plans[host])
        record = json.loads((store / "compile-cache" / key / "key.json").read_text())
        golden[key] = record["golden"]
        assert prewarm.inspect_store(store, key)["present"]
    assert sorted(golden.values()) == ["agxorin-jp6-02", "agxorin-jp72-01", "thor-02"]
    for host in SERVING:  # the same container, running again, serving
        assert container_state(host, "specfleet-vllm") == prewarmed["serving_before"][host]
        status = on_unit(host, "python3 -c \"import urllib.request as u; "
                               "print(u.urlopen('http://127.0.0.1:8000/v1/models').status)\"").stdout.strip()
        assert status == "200", host
    for host in UNITS:
        assert container_state(host, "specfleet-prewarm") == "", host


def test_second_run_starts_and_copies_nothing(prewarmed):
    second = prewarmed["second"]
    assert second.returncode == 0, second.stdout[-4000:]
    counters = recap(second.stdout)
    assert {host: counters[host]["changed"] for host in UNITS} == dict.fromkeys(UNITS, 0)
    assert "golden.yml" not in second.stdout
    fanout = second.stdout.split("Fan each key's store out")[1].split("TASK [")[0]
    assert "changed:" not in fanout and "ok:" not in fanout, fanout


def test_warm_cache_starts_faster(prewarmed, lab_plans):
    host = "agxorin-jp72-02"  # received its cache by fan-out
    (name,) = live(host)
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
