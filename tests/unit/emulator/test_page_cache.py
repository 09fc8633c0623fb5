"""The unit's EMULATED page cache counts as used memory at vLLM's start-up check
(lab/emulator/vllm_emulator/pagecache.py): the rule as pure functions, the files it reads
(ctime of the HF cache, the emulator's read records, the drop record), and servers that
fail or start by it. No lab: the state directory is a scratch one."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EAGLE3, EAGLE3_K5, TARGET, TARGET_FP4, THOR_GPU, stand_in_configs, write_stand_in
from vllm_emulator.errors import StartupFailure
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.hub import parse_model_info
from vllm_emulator.memory import counted_page_cache_gib, free_memory_gib, os_baseline_gib, plan_memory
from vllm_emulator.pagecache import (
    READ,
    WRITTEN,
    Drop,
    Fill,
    PageCache,
    cached_models,
    describe,
    load_page_cache,
    parse_drop,
    parse_read_record,
    read_fills,
    total_gib,
    written_fills,
)

CONFIGS = stand_in_configs()
THOR = parse_gpu_spec(THOR_GPU)
ORIN_NANO = parse_gpu_spec({"device_class": "orin_nano", "gpu_name": "Orin (nvgpu)", "memory_total_mib": 7441,
                            "memory_bandwidth_gbps": 102, "compute_capability": "8.7"})
FREE_MEMORY = re.compile(r"ValueError: Free memory on device cuda:0 \((\d+\.\d\d)/122\.82 GiB\) on startup is less "
                         r"than desired GPU memory utilization \(0\.9, 110\.54 GiB\)")
SECOND = 1_000_000_000


def model(name: str) -> Any:
    return parse_model_info(name, Path("/m"), CONFIGS[name])


# ---- the rule ---------------------------------------------------------------------------------
def test_what_came_after_the_drop_counts_and_what_came_before_does_not():
    fills = [Fill(TARGET, 14.99, 10 * SECOND, WRITTEN), Fill(EAGLE3, 0.79, 20 * SECOND, READ),
             Fill(TARGET_FP4, 6.07, 30 * SECOND, WRITTEN)]
    assert [m.model for m in cached_models(fills, dropped_at_ns=15 * SECOND)] == [TARGET_FP4, EAGLE3]
    assert total_gib(cached_models(fills, dropped_at_ns=15 * SECOND)) == pytest.approx(6.86)
    assert total_gib(cached_models(fills, dropped_at_ns=0)) == pytest.approx(21.85)
    # A later drop clears it all; a fill at the very time of the drop was dropped with it.
    assert cached_models(fills, dropped_at_ns=30 * SECOND) == ()


def test_a_model_written_and_read_counts_once():
    fills = [Fill(TARGET, 14.99, 10 * SECOND, WRITTEN), Fill(TARGET, 14.99, 12 * SECOND, READ)]
    (cached,) = cached_models(fills, dropped_at_ns=SECOND)
    assert (cached.model, cached.weights_gib, cached.how) == (TARGET, 14.99, (WRITTEN, READ))
    # Only the read came after this drop.
    (cached,) = cached_models(fills, dropped_at_ns=11 * SECOND)
    assert cached.how == (READ,)


def test_without_a_page_cache_free_memory_is_what_it_always_was():
    for gpu in (THOR, ORIN_NANO):
        assert free_memory_gib(gpu) == gpu.total_gib - gpu.used_by_others_gib - os_baseline_gib(gpu.total_gib)
        assert free_memory_gib(gpu, 0.0) == free_memory_gib(gpu)


def test_the_page_cache_counts_as_used_and_free_never_goes_below_zero():
    assert free_memory_gib(THOR, 14.99) == pytest.approx(free_memory_gib(THOR) - 14.99)
    # A page cache larger than the memory there is fills what is there, no more.
    room = free_memory_gib(ORIN_NANO)
    assert counted_page_cache_gib(ORIN_NANO, 60.0) == pytest.approx(room)
    assert free_memory_gib(ORIN_NANO, 60.0) == 0.0
    assert counted_page_cache_gib(ORIN_NANO, 2.0) == 2.0
    cache = PageCache(Path("/state"), Drop(0, "boot"), cached_models([Fill(TARGET, 14.99, 1, WRITTEN)], 0))
    line = describe(cache, counted_page_cache_gib(ORIN_NANO, cache.gib))
    assert f"{room:.2f} GiB counted as used memory (capped from 14.99 GiB" in line and "EMULATED" in line


def test_a_cached_model_fails_the_start_up_check_it_passes_without():
    def plan(page_cache_gib: float) -> Any:
        return plan_memory(THOR, model(TARGET), None, 0.9, 8192, 256, 8192, "auto", False,
                           page_cache_gib=page_cache_gib)

    assert plan(0.0).failure is None and plan(0.0).page_cache_gib == 0.0
    cached = plan(14.99)
    assert cached.failure_kind == "free_memory" and cached.page_cache_gib == 14.99
    assert FREE_MEMORY.search(cached.failure or ""), cached.failure
    assert FREE_MEMORY.search(cached.failure or "").group(1) == f"{free_memory_gib(THOR) - 14.99:.2f}"


# ---- the files --------------------------------------------------------------------------------
def hub_repo(hub: Path, repo: str, config: dict[str, Any]) -> Path:
    """A hub-layout repo as huggingface_hub (and the lab's store) writes it: the bytes in
    blobs/, the snapshot's files symlinks to them."""
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    revision = "0e9e39f249a16976918f6564b8830bc894c89659"
    (repo_dir / "blobs").mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for name, content in (("config.json", json.dumps(config)), ("model.safetensors", "filler")):
        blob = repo_dir / "blobs" / f"sha-{name}"
        blob.write_text(content)
        (snapshot / name).symlink_to(f"../../blobs/sha-{name}")
    return repo_dir


def test_a_copy_counts_by_ctime_even_when_it_kept_the_mtime(tmp_path):
    hub = tmp_path / "hub"
    before = time.time_ns()
    repo_dir = hub_repo(hub, TARGET, CONFIGS[TARGET])
    # rsync -a sets every file's mtime back to the source's; no copy can do that to ctime.
    for blob in (repo_dir / "blobs").iterdir():
        os.utime(blob, ns=(SECOND, SECOND))
    (fill,) = written_fills(hub)
    assert (fill.model, fill.weights_gib, fill.how) == (TARGET, 14.99, WRITTEN)
    assert fill.at_ns > before - SECOND  # ctime: now, not the 1970 mtime
    assert [m.model for m in cached_models([fill], dropped_at_ns=before - SECOND)] == [TARGET]


def test_only_stand_ins_are_counted_with_their_emulated_size(tmp_path):
    hub = tmp_path / "hub"
    hub_repo(hub, TARGET_FP4, CONFIGS[TARGET_FP4])
    hub_repo(hub, "org/plain-files", {"architectures": ["LlamaForCausalLM"]})  # no specfleet_emulated block
    write_stand_in(hub, EAGLE3, CONFIGS[EAGLE3])  # snapshot files, no blobs/ (a local-dir style copy)
    (hub / ".locks").mkdir()
    assert sorted((f.model, f.weights_gib) for f in written_fills(hub)) == sorted([(EAGLE3, 0.79), (TARGET_FP4, 6.07)])
    assert written_fills(tmp_path / "no-hub-here") == []


def test_read_records_round_trip_and_a_bad_one_is_skipped(tmp_path):
    reads = tmp_path / "reads"
    reads.mkdir()
    (reads / "1-a.json").write_text(json.dumps({"read_at_ns": 5 * SECOND,
                                                "models": [{"model": TARGET_FP4, "weights_gib": 6.07},
                                                           {"model": EAGLE3, "weights_gib": 0.79}]}))
    (reads / "2-b.json").write_text("{not json")
    (reads / ".3-c.json.tmp").write_text("{}")  # being written
    fills = read_fills(reads)
    assert [(f.model, f.at_ns, f.how) for f in fills] == [(TARGET_FP4, 5 * SECOND, READ), (EAGLE3, 5 * SECOND, READ)]
    for bad in ({"models": []}, {"read_at_ns": 1, "models": [{"model": TARGET, "weights_gib": [1]}]},
                {"read_at_ns": 1, "models": [{"model": TARGET}]}):
        with pytest.raises(ValueError):
            parse_read_record(bad)


def test_the_drop_record_is_validated():
    assert parse_drop({"dropped_at_ns": 7, "reason": "boot"}).reason == "boot"
    for bad in ({}, {"dropped_at_ns": "7"}, {"dropped_at_ns": True}, {"dropped_at_ns": -1}, []):
        with pytest.raises(ValueError):
            parse_drop(bad)


def test_no_state_means_no_page_cache_and_a_broken_one_fails_plainly(tmp_path):
    hub = tmp_path / "hub"
    hub_repo(hub, TARGET, CONFIGS[TARGET])
    env = {"SPECFLEET_EMULATOR_PAGE_CACHE_DIR": str(tmp_path / "page-cache")}
    assert load_page_cache(env, hub) is None  # nothing mounted: not emulated, whatever the HF cache holds
    (tmp_path / "page-cache").mkdir()
    (tmp_path / "page-cache" / "dropped.json").write_text('{"reason": "boot"}')
    with pytest.raises(StartupFailure) as failure:
        load_page_cache(env, hub)
    assert "invalid page cache state" in failure.value.exception_text


# ---- servers ----------------------------------------------------------------------------------
def drop(state_dir: Path, at_ns: int | None = None, reason: str = "sysctl vm.drop_caches=3") -> None:
    """A drop record as the unit writes it (see tests/unit/lab/test_lab_page_cache.py)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    record = {"emulated": True, "dropped_at_ns": time.time_ns() if at_ns is None else at_ns, "reason": reason}
    (state_dir / "dropped.json").write_text(json.dumps(record))


@pytest.fixture()
def unit_env(lab_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The emulator as a container on a lab unit sees it: its own HF cache (empty here) and
    the unit's page-cache state directory."""
    (tmp_path / "unit-hf" / "hub").mkdir(parents=True)
    return {**lab_env, "HF_HOME": str(tmp_path / "unit-hf")}


def hub_of(env: dict[str, str]) -> Path:
    return Path(env["HF_HOME"]) / "hub"


def state_of(env: dict[str, str]) -> Path:
    return Path(env["SPECFLEET_EMULATOR_PAGE_CACHE_DIR"])


def test_a_large_model_copied_after_the_last_drop_fails_the_start(launch, unit_env):
    drop(state_of(unit_env), time.time_ns() - SECOND, reason="boot")  # the unit started
    hub_repo(hub_of(unit_env), TARGET, CONFIGS[TARGET])  # prepare's rsync: 14.99 emulated GiB
    failed = launch(TARGET, ["--max-model-len", "8192"], env=unit_env, ready=False)
    assert failed.wait_exit() == 1
    errors = "\n".join(failed.stderr)
    match = FREE_MEMORY.search(errors)
    assert match and match.group(1) == f"{free_memory_gib(THOR) - 14.99:.2f}", errors
    line = next(line for line in failed.stdout if "EMULATED page cache" in line)
    assert " INFO " in line and "14.99 GiB counted as used memory" in line and f"{TARGET} 14.99 GiB" in line
    assert not list((state_of(unit_env) / "reads").glob("*.json"))  # it never loaded its weights

    drop(state_of(unit_env))  # `sync && sysctl -w vm.drop_caches=3`
    server = launch(TARGET, ["--max-model-len", "8192"], env=unit_env)
    info = json.loads(server.get("/specfleet/emulator")[2])["page_cache"]
    assert (info["present"], info["models"], info["counted_gib"]) == (True, [], 0.0)
    assert info["last_drop"]["reason"] == "sysctl vm.drop_caches=3"
    assert any("EMULATED page cache" in line and "empty" in line for line in server.stdout)


def test_weights_an_earlier_server_read_stay_cached_until_the_next_drop(launch, unit_env):
    drop(state_of(unit_env), time.time_ns() - SECOND, reason="boot")
    hub = hub_of(unit_env)
    hub_repo(hub, TARGET, CONFIGS[TARGET])
    hub_repo(hub, EAGLE3, CONFIGS[EAGLE3])
    drop(state_of(unit_env))
    first = launch(TARGET, ["--max-model-len", "8192", "--speculative-config", EAGLE3_K5], env=unit_env)
    record = json.loads(first.get("/specfleet/emulator")[2])["page_cache"]["read_record"]
    assert [(m["model"], m["weights_gib"]) for m in json.loads(Path(record).read_text())["models"]] == [
        (TARGET, 14.99), (EAGLE3, 0.79)]
    first.stop()  # the container stops; its weights stay in the page cache

    again = launch(TARGET, ["--max-model-len", "8192"], env=unit_env, ready=False)
    assert again.wait_exit() == 1
    match = FREE_MEMORY.search("\n".join(again.stderr))
    assert match and match.group(1) == f"{free_memory_gib(THOR) - 14.99 - 0.79:.2f}", again.output

    drop(state_of(unit_env))
    launch(TARGET, ["--max-model-len", "8192"], env=unit_env)


def test_the_info_endpoint_lists_what_was_counted(launch, unit_env):
    drop(state_of(unit_env), time.time_ns() - SECOND, reason="boot")
    hub_repo(hub_of(unit_env), TARGET_FP4, CONFIGS[TARGET_FP4])
    server = launch(TARGET_FP4, ["--max-model-len", "8192"], env=unit_env)  # 6.07 GiB still fits on a Thor
    info = json.loads(server.get("/specfleet/emulator")[2])["page_cache"]
    assert info["emulated"] is True and info["present"] is True
    assert info["models"] == [{"model": TARGET_FP4, "weights_gib": 6.07, "how": [WRITTEN]}]
    assert info["counted_gib"] == 6.07 and info["last_drop"]["reason"] == "boot"


def test_without_state_nothing_is_counted_or_recorded(launch, unit_env):
    hub_repo(hub_of(unit_env), TARGET, CONFIGS[TARGET])
    server = launch(TARGET, ["--max-model-len", "8192"], env=unit_env)
    info = json.loads(server.get("/specfleet/emulator")[2])["page_cache"]
    assert (info["present"], info["counted_gib"], info["read_record"]) == (False, 0.0, None)
    assert not state_of(unit_env).exists()
    assert not any("EMULATED page cache" in line for line in server.stdout)
