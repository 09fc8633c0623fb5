"""Compile-cache key, golden choice, distribution jobs and the controller store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specfleet import prewarm, serving

IMAGE = "10.213.77.1:5000/vllm/vllm-openai:v0.20.2"
MODEL = "nvidia/Llama-3.1-8B-Instruct-FP4"
SPEC = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}
FLAGS = [["--gpu-memory-utilization", "0.80"], ["--max-model-len", "8192"], ["--max-num-seqs", "8"], ["--seed", "42"]]


def spec(model=MODEL, port=8000, flags=FLAGS, extra=(), speculative_config=SPEC) -> dict:
    return serving.make("speculative", engine="vllm", image=IMAGE, model=model, port=port, flags=flags,
                        extra_flags=extra, speculative_config=speculative_config)


SERVING = spec()


def key(spec=SERVING, device_class="thor", image=IMAGE, digest=None) -> str:
    return prewarm.cache_key(device_class, image, digest, spec)


def replaced(flag: str, value: str) -> dict:
    """SERVING with one of the plan's flags set to another value."""
    assert flag in dict(FLAGS)
    return spec(flags=[[name, value if name == flag else old] for name, old in FLAGS])


def test_key_is_readable_stable_and_a_directory_name():
    assert key() == key()
    assert key().startswith("thor-") and len(key()) == len("thor-") + 12
    assert "/" not in key()


def test_the_key_is_the_one_argv_keys_had():
    # `vllm serve MODEL --host 0.0.0.0 --port 8000 --gpu-memory-utilization 0.80 --max-model-len 8192
    # --max-num-seqs 8 --seed 42 --speculative-config SPEC` had this key when the plan carried argv:
    # stores collected then are still found.
    assert serving.argv(SERVING) == [
        "vllm", "serve", MODEL, "--host", "0.0.0.0", "--port", "8000", "--gpu-memory-utilization", "0.80",
        "--max-model-len", "8192", "--max-num-seqs", "8", "--seed", "42",
        "--speculative-config", json.dumps(SPEC, separators=(",", ":"))]
    assert key() == "thor-57c9c29f80bb"
    assert prewarm.graph_args(SERVING) == {"model": MODEL, "--max-model-len": "8192", "--max-num-seqs": "8",
                                           "--speculative-config": SPEC}


@pytest.mark.parametrize("flag,value", [("--seed", "7"), ("--gpu-memory-utilization", "0.75")])
def test_args_outside_the_compiled_graph_do_not_change_the_key(flag, value):
    assert key(replaced(flag, value)) == key()


def test_the_address_does_not_change_the_key(monkeypatch):
    assert key(spec(port=9000)) == key()
    before = key()
    monkeypatch.setattr(serving, "HOST", "127.0.0.1")
    assert dict(serving.engine_flags(SERVING))["--host"] == "127.0.0.1"
    assert key() == before


def test_dropping_or_adding_neutral_flags_keeps_the_key():
    without = spec(flags=[pair for pair in FLAGS if pair[0] != "--seed"])
    assert key(without) == key()
    assert key(spec(extra=[["--served-model-name", "llm"], ["--disable-log-stats", None]])) == key()


@pytest.mark.parametrize("flag,value", [("--max-model-len", "4096"), ("--max-num-seqs", "16")])
def test_graph_args_change_the_key(flag, value):
    assert key(replaced(flag, value)) != key()


def test_the_speculative_config_changes_the_key():
    assert key(spec(speculative_config={**SPEC, "num_speculative_tokens": 3})) != key()
    assert key(spec(speculative_config=None)) != key()


def test_model_quantization_and_switches_change_the_key():
    assert key(spec(model="meta-llama/Llama-3.1-8B-Instruct")) != key()
    assert key(spec(extra=[["--quantization", "fp8"]])) != key()
    assert key(spec(extra=[["--enforce-eager", None]])) != key()


def test_spelling_does_not_change_the_key():
    # Flag order, `--flag=value` and JSON key order: the serving holds flags normalised, JSON as dicts.
    reordered = spec(flags=serving.normalise_flags(["--max-num-seqs=8", "--max-model-len", "8192"]),
                     speculative_config=dict(sorted(SPEC.items(), reverse=True)))
    assert key(reordered) == key()
    # vLLM's short aliases are spelled out when the user's flags are read.
    compiled = '{"level": 3, "cudagraph_mode": "FULL"}'
    aliased = spec(extra=serving.normalise_flags(["-O", compiled, "-tp", "1"]))
    spelled = spec(extra=serving.normalise_flags(
        ["--compilation-config", json.dumps(json.loads(compiled), sort_keys=True, indent=2),
         "--tensor-parallel-size", "1"]))
    assert key(aliased) == key(spelled) != key()


def test_device_class_and_image_change_the_key():
    assert key(device_class="agx_orin") != key()
    assert key(image=IMAGE.replace("v0.20.2", "v0.21.0")) != key()


def test_a_pinned_digest_names_the_image():
    digest = "sha256:" + "a" * 64
    # Same bytes under another tag or mirror: same key.
    assert key(digest=digest) == key(image="mirror.lan/vllm:other", digest=digest)
    assert key(digest=digest) != key()


def test_plan_key_none_for_a_refused_plan():
    plan = {"device_class": "thor", "image": IMAGE, "image_digest": None, "serving": SERVING, "refused": False}
    assert prewarm.plan_key(plan) == key()
    assert prewarm.plan_key({**plan, "refused": True}) is None
    assert prewarm.plan_factors({**plan, "refused": True}) is None
    assert prewarm.plan_factors(plan)["args"]["--max-num-seqs"] == "8"


# ---- grouping ------------------------------------------------------------------------------
def test_one_golden_per_key_first_in_inventory_order():
    units = [{"host": "a1", "key": "A"}, {"host": "b1", "key": "B"}, {"host": "a2", "key": "A"},
             {"host": "x", "key": None}]
    groups = prewarm.group_units(units)
    assert list(groups) == ["A", "B"]
    assert groups["A"] == {"golden": "a1", "units": ["a1", "a2"]}
    assert groups["B"] == {"golden": "b1", "units": ["b1"]}


def test_golden_prefers_an_idle_unit_and_is_deterministic():
    units = [{"host": "a1", "key": "A", "serving": True}, {"host": "a2", "key": "A", "serving": False},
             {"host": "a3", "key": "A", "serving": False}]
    assert prewarm.group_units(units)["A"]["golden"] == "a2"
    all_serving = [{**u, "serving": True} for u in units]
    assert prewarm.group_units(all_serving)["A"]["golden"] == "a1"
    assert prewarm.group_units(units) == prewarm.group_units(list(units))


def test_distribution_jobs_only_for_present_stores_and_missing_entries():
    units = [{"host": "a1", "key": "A", "missing": []}, {"host": "a2", "key": "A", "missing": ["h1"]},
             {"host": "b1", "key": "B", "missing": []}, {"host": "c1", "key": "C", "missing": ["h3"]},
             {"host": "n", "key": None, "missing": []}]
    stores = {"A": {"present": True, "entries": [{"name": "h1"}, {"name": "h2"}]},
              "B": {"present": True, "entries": [{"name": "h1"}]},
              "C": {"present": False, "entries": []}}
    # Every unit of the key is a target (holders serve their peers); other keys never.
    assert prewarm.distribution_jobs(units, stores) == [{"key": "A", "entry": "h1", "units": ["a1", "a2"]}]
    assert prewarm.distribution_jobs([{**u, "missing": []} for u in units], stores) == []


# ---- the controller store --------------------------------------------------------------------
def golden_root(base: Path, digest: str = "1cdbbe8494", payload: bytes = b"graph") -> Path:
    rank = base / "torch_compile_cache" / digest / "rank_0_0"
    (rank / "backbone").mkdir(parents=True)
    (rank / "backbone" / "computation_graph.py").write_bytes(payload)
    (rank / "vllm_compile_cache.py").write_text("{}\n")
    (base / "torch_compile_cache" / f".{digest}.tmp").mkdir()  # an interrupted write, ignored
    return base


def test_collect_then_inspect(tmp_path):
    store = tmp_path / "store"
    assert prewarm.inspect_store(store, "thor-abc")["present"] is False
    result = prewarm.collect(store, "thor-abc", golden_root(tmp_path / "fetched"), {"golden": "t1"})
    assert [e["name"] for e in result["entries"]] == ["1cdbbe8494"]
    assert not (tmp_path / "fetched").exists()
    inspected = prewarm.inspect_store(store, "thor-abc")
    assert inspected["present"] and inspected["problems"] == []
    (entry,) = inspected["entries"]
    assert prewarm.MARKER in entry["manifest"]["files"]
    live = store / "compile-cache" / "thor-abc" / "torch_compile_cache" / "1cdbbe8494"
    assert live.is_symlink() and not os.path.isabs(os.readlink(live))
    marker = json.loads((live / prewarm.MARKER).read_text())
    assert marker["key"] == "thor-abc" and marker["hash"] == "1cdbbe8494"
    record = json.loads((store / "compile-cache" / "thor-abc" / "key.json").read_text())
    assert record["entries"] == ["1cdbbe8494"] and record["golden"] == "t1"


def test_same_vllm_hash_under_two_keys_gives_two_distinct_stores(tmp_path):
    store = tmp_path / "store"
    one = prewarm.collect(store, "agx_orin-1", golden_root(tmp_path / "f1"), {})
    two = prewarm.collect(store, "agx_orin-2", golden_root(tmp_path / "f2"), {})
    assert one["entries"][0]["name"] == two["entries"][0]["name"]
    assert one["entries"][0]["id"] != two["entries"][0]["id"]  # the marker names the key


def test_a_damaged_or_incomplete_store_is_not_present(tmp_path):
    store = tmp_path / "store"
    prewarm.collect(store, "k", golden_root(tmp_path / "fetched", payload=b"x" * 100), {})
    base = store / "compile-cache" / "k"
    graph = base / "torch_compile_cache" / "1cdbbe8494" / "rank_0_0" / "backbone" / "computation_graph.py"
    graph.write_bytes(b"y" * 100)  # same size, other bytes
    assert prewarm.inspect_store(store, "k", full=False)["present"] is True
    damaged = prewarm.inspect_store(store, "k", full=True)
    assert not damaged["present"] and damaged["entries"] == [] and "sha256" in damaged["problems"][0]
    (base / "key.json").unlink()  # what an interrupted collect leaves: no record
    assert not prewarm.inspect_store(store, "k")["present"]


def test_recollecting_replaces_the_store_atomically(tmp_path):
    store = tmp_path / "store"
    prewarm.collect(store, "k", golden_root(tmp_path / "f1", payload=b"one"), {})
    prewarm.collect(store, "k", golden_root(tmp_path / "f2", payload=b"two!"), {})
    inspected = prewarm.inspect_store(store, "k")
    assert inspected["present"]
    versions = store / "compile-cache" / "k" / ".specfleet" / "versions" / "1cdbbe8494"
    assert [p.name for p in versions.iterdir()] == [inspected["entries"][0]["id"]]


def test_collect_refuses_a_root_without_compiled_graphs(tmp_path):
    (tmp_path / "fetched").mkdir()
    with pytest.raises(ValueError, match="no torch_compile_cache"):
        prewarm.collect(tmp_path / "store", "k", tmp_path / "fetched", {})
    assert not prewarm.inspect_store(tmp_path / "store", "k")["present"]


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b"])
def test_bad_keys_never_leave_the_store(tmp_path, bad):
    with pytest.raises(ValueError):
        prewarm.key_store(tmp_path, bad)
