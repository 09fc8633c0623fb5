"""Compile-cache key, golden choice, distribution jobs and the controller store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specfleet import prewarm, serving
from tests.conftest import plan_for

IMAGE = "10.213.77.1:5000/vllm/vllm-openai:v0.20.2"
MODEL = "nvidia/Llama-3.1-8B-Instruct-FP4"
EVENT = "Qwen/Qwen3-0.6B"
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


# ---- a unit's servings ----------------------------------------------------------------------
def test_a_unit_warms_its_candidate_and_its_baseline(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), MODEL)
    servings = prewarm.unit_servings(plan)
    assert [(s["sources"], s["serving"]["kind"]) for s in servings] == [(["plan"], "speculative"),
                                                                        (["baseline"], "baseline")]
    # The candidate's key is the one the store has always had (existing stores stay valid).
    assert servings[0]["key"] == prewarm.plan_key(plan)
    assert servings[0]["factors"] == prewarm.plan_factors(plan)
    # Baseline and candidate differ by --speculative-config only (and the neutral utilisation).
    args = [s["factors"]["args"] for s in servings]
    assert {k: v for k, v in args[0].items() if k != "--speculative-config"} == args[1]
    assert servings[1]["key"] == prewarm.cache_key("thor", plan["image"], plan["image_digest"],
                                                   plan["baseline_serving"])


def test_the_candidates_key_is_the_plans_key_of_old():
    # A store collected when a unit had one key (its plan's serving) is still that serving's.
    plan = {"device_class": "thor", "image": IMAGE, "image_digest": None, "serving": SERVING,
            "baseline_serving": spec(speculative_config=None), "refused": False}
    candidate, baseline = prewarm.unit_servings(plan)
    assert candidate["key"] == prewarm.plan_key(plan) == "thor-57c9c29f80bb"
    assert baseline["key"] == key(spec(speculative_config=None)) != candidate["key"]
    # A pinned digest names the plan's image for each of its servings.
    digest = "sha256:" + "a" * 64
    pinned = prewarm.unit_servings({**plan, "image_digest": digest})
    assert [s["key"] for s in pinned] == [key(digest=digest), key(spec(speculative_config=None), digest=digest)]
    assert pinned[0]["factors"]["image"] == digest


def test_which_servings_are_warmed_is_chosen(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), MODEL, specfleet_event_models=[EVENT])
    assert [s["sources"] for s in prewarm.unit_servings(plan)] == [["plan"], ["baseline"], ["event"], ["event"]]
    assert [s["sources"] for s in prewarm.unit_servings(plan, ["baseline"])] == [["baseline"]]
    event = prewarm.unit_servings(plan, ["event"])
    assert [(s["serving"]["model"], s["serving"]["kind"]) for s in event] == [(EVENT, "baseline"),
                                                                              (EVENT, "speculative")]
    assert prewarm.unit_servings(plan, []) == []
    with pytest.raises(ValueError, match="'candidate'"):
        prewarm.unit_servings(plan, ["plan", "candidate"])


def test_servings_with_the_same_graph_share_one_key(unit_facts):
    # An event model that is the plan's own model: its servings are the plan's, one key each.
    plan = plan_for(unit_facts("thor-r38"), MODEL, specfleet_event_models=[MODEL])
    servings = prewarm.unit_servings(plan)
    assert [s["sources"] for s in servings] == [["plan", "event"], ["baseline", "event"]]
    # A plan whose speculation does not fit serves its baseline as the candidate: one key.
    baseline_only = {**plan, "serving": {**plan["baseline_serving"], "kind": "speculative"}, "event": {}}
    (only,) = prewarm.unit_servings(baseline_only)
    assert only["sources"] == ["plan", "baseline"]


def test_refused_plans_and_other_engines_have_nothing_to_warm(unit_facts):
    refused = plan_for(unit_facts("x86-server"), MODEL)
    assert refused["refused"]
    assert prewarm.unit_servings(refused) == [] and prewarm.plan_key(refused) is None
    # Refused for its own model, the unit still plans the event's (prepare stages neither).
    nano = plan_for(unit_facts("orin-nano-8gb-r36"), "meta-llama/Llama-3.1-8B-Instruct", specfleet_event_models=[EVENT])
    assert nano["refused"] and nano["image"] and nano["event"]["servings"]
    assert prewarm.unit_servings(nano) == []
    # The DGX Spark serves with TensorRT-LLM: no torch.compile cache to warm, for its event models neither.
    spark = plan_for(unit_facts("dgx-spark"), MODEL, specfleet_event_models=[EVENT])
    assert not spark["refused"] and spark["serving"]["engine"] == "trtllm"
    assert spark["event"]["servings"] and {s["engine"] for s in spark["event"]["servings"]} == {"trtllm"}
    assert prewarm.unit_servings(spark) == [] and prewarm.plan_key(spark) is None


# ---- grouping ------------------------------------------------------------------------------
def test_one_golden_per_key_first_in_inventory_order():
    units = [{"host": "a1", "cache_keys": ["A"]}, {"host": "b1", "cache_keys": ["B"]},
             {"host": "a2", "cache_keys": ["A"]}, {"host": "x", "cache_keys": []}]
    groups = prewarm.group_units(units)
    assert list(groups) == ["A", "B"]
    assert groups["A"] == {"golden": "a1", "units": ["a1", "a2"]}
    assert groups["B"] == {"golden": "b1", "units": ["b1"]}


def test_golden_prefers_an_idle_unit_and_is_deterministic():
    units = [{"host": "a1", "cache_keys": ["A"], "serving": True},
             {"host": "a2", "cache_keys": ["A"], "serving": False},
             {"host": "a3", "cache_keys": ["A"], "serving": False}]
    assert prewarm.group_units(units)["A"]["golden"] == "a2"
    all_serving = [{**u, "serving": True} for u in units]
    assert prewarm.group_units(all_serving)["A"]["golden"] == "a1"
    assert prewarm.group_units(units) == prewarm.group_units(list(units))


def test_a_unit_with_several_keys():
    # One unit alone with its two keys compiles both; idle units of shared keys share the work
    # (their golden runs go side by side); a serving unit is the golden unit only when no unit
    # of the key is idle, and then the first takes all of them (stopped once, not twice).
    units = [{"host": "solo", "cache_keys": ["S1", "S2"], "serving": True},
             {"host": "i1", "cache_keys": ["P", "B", "E1", "E2"]},
             {"host": "i2", "cache_keys": ["P", "B", "E1", "E2"]},
             {"host": "s1", "cache_keys": ["Q", "R"], "serving": True},
             {"host": "s2", "cache_keys": ["Q", "R"], "serving": True},
             {"host": "w", "cache_keys": ["W1", "W2"], "serving": True}, {"host": "wi", "cache_keys": ["W2"]}]
    groups = prewarm.group_units(units)
    assert {key: group["golden"] for key, group in groups.items()} == {
        "S1": "solo", "S2": "solo", "P": "i1", "B": "i2", "E1": "i1", "E2": "i2", "Q": "s1", "R": "s1",
        "W1": "w", "W2": "wi"}
    assert groups["P"]["units"] == ["i1", "i2"] and groups["W2"]["units"] == ["w", "wi"]


def test_golden_runs_are_the_golden_units_missing_stores():
    servings = [{"key": "P"}, {"key": "B"}, {"key": "E"}]
    groups = {"P": {"golden": "u1"}, "B": {"golden": "u2"}, "E": {"golden": "u1"}}
    stores = {"P": {"present": False}, "B": {"present": False}, "E": {"present": True}}
    assert prewarm.golden_runs(servings, groups, stores, "u1") == [{"key": "P"}]
    assert prewarm.golden_runs(servings, groups, stores, "u2") == [{"key": "B"}]
    assert prewarm.golden_runs(servings, groups, {}, "u1") == [{"key": "P"}, {"key": "E"}]


# ---- what each unit holds and gets ---------------------------------------------------------------
def store_of(*names: str, present: bool = True) -> dict:
    return {"present": present, "entries": [{"name": n, "id": f"id-{n}", "manifest": {"name": n}} for n in names]}


def test_a_unit_takes_every_entry_of_its_keys_each_name_once():
    stores = {"P": store_of("h1"), "B": store_of("h2", "h1"), "E": store_of("h3", present=False)}
    entries = prewarm.unit_entries(["P", "B", "E"], stores)
    # h1 under both P and B: one vLLM hash directory on the unit, taken from P (the first key).
    assert [(e["key"], e["name"], e["ref"]) for e in entries] == [("P", "h1", "P/h1"), ("B", "h2", "B/h2")]
    assert entries[0]["manifest"] == {"name": "h1"} and entries[0]["id"] == "id-h1"
    assert [e["ref"] for e in prewarm.unit_entries(["B", "P"], stores)] == ["B/h2", "B/h1"]


def test_distribution_jobs_only_for_present_stores_and_missing_entries():
    units = [{"host": "a1", "cache_keys": ["A"], "missing": []},
             {"host": "a2", "cache_keys": ["A"], "missing": ["A/h1"]},
             {"host": "b1", "cache_keys": ["B"], "missing": []},
             {"host": "c1", "cache_keys": ["C"], "missing": ["C/h3"]},
             {"host": "n", "cache_keys": [], "missing": []}]
    stores = {"A": store_of("h1", "h2"), "B": store_of("h1"), "C": store_of(present=False)}
    # Every unit of the key is a target (holders serve their peers); other keys never.
    # The job the fan-out role's distribute tasks take: the key's store into the compile cache.
    assert prewarm.distribution_jobs(units, stores, "/ctl/store", "/unit/cache") == [
        {"label": "A: h1", "store": "/ctl/store/compile-cache/A", "name": "h1", "subdir": "torch_compile_cache",
         "root": "/unit/cache", "units": ["a1", "a2"]}]
    assert prewarm.distribution_jobs([{**u, "missing": []} for u in units], stores, "/s", "/r") == []


def test_distribution_jobs_for_units_of_several_keys():
    units = [{"host": "u1", "cache_keys": ["P1", "B", "E"], "missing": ["P1/p1", "B/b", "E/e"]},
             {"host": "u2", "cache_keys": ["P2", "B", "E"], "missing": ["E/e"]},
             {"host": "u3", "cache_keys": ["P2", "E"], "missing": ["P2/p2"]}]
    stores = {"P1": store_of("p1"), "B": store_of("b"), "E": store_of("e"), "P2": store_of("p2")}
    assert [(job["label"], job["units"]) for job in prewarm.distribution_jobs(units, stores, "/s", "/r")] == [
        ("P1: p1", ["u1"]), ("B: b", ["u1", "u2"]), ("E: e", ["u1", "u2", "u3"]), ("P2: p2", ["u2", "u3"])]
    # An entry a unit takes from an earlier key is never sent to it under the later key.
    shared = {"A": store_of("h"), "B": store_of("h")}
    jobs = prewarm.distribution_jobs([{"host": "u", "cache_keys": ["A", "B"], "missing": ["A/h"]},
                                      {"host": "v", "cache_keys": ["B"], "missing": ["B/h"]}], shared, "/s", "/r")
    assert [(job["store"], job["name"], job["units"]) for job in jobs] == [
        ("/s/compile-cache/A", "h", ["u"]), ("/s/compile-cache/B", "h", ["v"])]


def test_unit_result_and_its_summary(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), MODEL)
    servings = prewarm.unit_servings(plan)
    candidate, baseline = (s["key"] for s in servings)
    groups = {candidate: {"golden": "unit-1"}, baseline: {"golden": "unit-2"}}
    stores = {candidate: store_of("h1"), baseline: store_of("h2", "h1")}
    result = prewarm.unit_result(servings, groups, stores, "unit-1", [f"{baseline}/h2"])
    assert result == {"keys": [
        {"key": candidate, "sources": ["plan"], "model": MODEL, "method": "eagle3", "golden": True,
         "entries": ["h1"], "shared": [], "received": []},
        {"key": baseline, "sources": ["baseline"], "model": MODEL, "method": None, "golden": False,
         "entries": ["h2"], "shared": ["h1"], "received": ["h2"]}]}
    assert prewarm.summary_lines(result) == [
        f"{candidate} (plan: {MODEL} + eagle3): golden, entries h1, received nothing",
        f"{baseline} (baseline: {MODEL}): entries h2, received h2, shares h1 with an earlier key"]
    assert prewarm.summary_lines(prewarm.unit_result([], {}, {}, "unit-1", [])) == [
        "no vLLM serving to warm (plan refused, another engine, or none selected)"]


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
