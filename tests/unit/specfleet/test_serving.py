"""specfleet.serving: the one structure of a serving and its one rendering."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from specfleet import plan_trtllm, release, serving
from tests.conftest import plan_for

EAGLE3 = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}
FLAGS = [["--gpu-memory-utilization", "0.80"], ["--max-model-len", "8192"]]


def vllm(kind="speculative", **fields) -> dict:
    made = serving.make(kind, engine="vllm", image="img:1", model="m", port=9000,
                        flags=fields.pop("flags", FLAGS), **fields)
    return serving.for_unit(made, {"HF_HUB_OFFLINE": "1"}, ["/a:/b"], ["VLLM_API_KEY", "HF_TOKEN"])


def test_vllm_argv_is_the_plan_then_speculation_then_the_users_flags():
    extra = [["--enforce-eager", None], ["--max-num-batched-tokens", "2048"]]
    spec = vllm(speculative_config=EAGLE3, extra_flags=extra)
    assert serving.argv(spec) == [
        "vllm", "serve", "m", "--host", "0.0.0.0", "--port", "9000",
        "--gpu-memory-utilization", "0.80", "--max-model-len", "8192",
        "--speculative-config", json.dumps(EAGLE3, separators=(",", ":"), sort_keys=True),
        "--enforce-eager", "--max-num-batched-tokens", "2048",
    ]
    assert serving.files(spec) == {}
    assert dict(serving.engine_flags(spec))["--port"] == "9000"
    assert serving.speculation(spec) == {"method": "eagle3", "num_speculative_tokens": 5}
    assert serving.draft_repo(spec) == EAGLE3["model"]


def test_a_baseline_has_no_speculation():
    spec = vllm("baseline")
    assert "--speculative-config" not in serving.argv(spec)
    assert serving.speculation(spec) == {"method": None, "num_speculative_tokens": None}
    assert serving.speculation(None) == {"method": None, "num_speculative_tokens": None}
    assert serving.draft_repo(spec) is None


def test_trtllm_renders_its_options_file_and_names_it():
    options = {"disable_overlap_scheduler": False,
               "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3}}
    spec = serving.make("speculative", engine="trtllm", image="img", model="m", port=8000,
                        flags=[["--backend", "pytorch"]], engine_options=options)
    path = serving.TRTLLM_OPTIONS_PATHS["speculative"]
    assert serving.argv(spec) == ["trtllm-serve", "m", "--host", "0.0.0.0", "--port", "8000", "--backend", "pytorch",
                                  serving.TRTLLM_OPTIONS_FLAG, path]
    assert yaml.safe_load(serving.files(spec)[path]) == options
    assert list(yaml.safe_load(serving.files(spec)[path])) == sorted(options)  # canonical: keys sorted
    reordered = {**spec, "engine_options": dict(reversed(list(options.items())))}
    assert serving.files(reordered) == serving.files(spec)  # however the dict travelled
    assert serving.speculation(spec) == {"method": "eagle3", "num_speculative_tokens": 3}
    baseline = {**spec, "kind": "baseline", "engine_options": {"disable_overlap_scheduler": False}}
    assert serving.argv(baseline)[-1] == serving.TRTLLM_OPTIONS_PATHS["baseline"]
    assert serving.speculation(baseline)["method"] is None


@pytest.mark.parametrize(
    ("words", "pairs"),
    [
        (["--enforce-eager"], [["--enforce-eager", None]]),
        (["--max-num-batched-tokens=2048", "--x", "-1"], [["--max-num-batched-tokens", "2048"], ["--x", "-1"]]),
        (["-O", '{"level": 3}'], [["--compilation-config", {"level": 3}]]),
        (["-sc", '{"method": "ngram"}'], [["--speculative-config", {"method": "ngram"}]]),
        (["-tp", "2", "--switch"], [["--tensor-parallel-size", "2"], ["--switch", None]]),
    ],
)
def test_normalise_flags(words, pairs):
    assert serving.normalise_flags(words) == pairs


@pytest.mark.parametrize(
    ("words", "message"),
    [(["stray"], "expected a flag, got 'stray'"), (["--compilation-config", "{oops"], "takes JSON")],
)
def test_normalise_flags_refuses_what_is_not_a_flag_list(words, message):
    with pytest.raises(serving.ServingError, match=message):
        serving.normalise_flags(words)


def test_make_refuses_an_unknown_kind_or_engine():
    with pytest.raises(serving.ServingError, match="kind"):
        serving.make("candidate", engine="vllm", image="i", model="m", port=1, flags=[])
    with pytest.raises(serving.ServingError, match="engine"):
        serving.make("baseline", engine="sglang", image="i", model="m", port=1, flags=[])


def test_the_id_is_what_the_unit_runs_and_a_version_1_id_is_kept():
    spec = vllm(speculative_config=EAGLE3)
    # Version 1 hashed the same fields, with the command line as `args`.
    v1_identity = {"kind": spec["kind"], "image": spec["image"], "args": serving.argv(spec), "env": spec["env"],
                   "mounts": spec["mounts"], "secret_env_names": spec["secret_env_names"]}
    v1_id = hashlib.sha256(json.dumps(v1_identity, sort_keys=True).encode()).hexdigest()[:16]
    assert spec["spec_id"] == v1_id
    assert vllm(speculative_config={**EAGLE3, "num_speculative_tokens": 2})["spec_id"] != spec["spec_id"]
    assert spec["secret_env_names"] == ["HF_TOKEN", "VLLM_API_KEY"]  # names only, sorted


def test_files_count_in_the_id_only_when_there_are_some():
    def trtllm(options):
        return serving.for_unit(serving.make("speculative", engine="trtllm", image="i", model="m", port=8000,
                                             flags=[], engine_options=options), {}, [], [])

    assert trtllm({"a": 1})["spec_id"] != trtllm({"a": 2})["spec_id"]
    assert vllm()["spec_id"] == vllm()["spec_id"]


@pytest.mark.parametrize(("facts", "model"), [("thor-r38", "nvidia/Llama-3.1-8B-Instruct-FP4"),
                                              ("orin-nano-8gb-r36", "meta-llama/Llama-3.2-1B-Instruct"),
                                              ("dgx-spark", "openai/gpt-oss-120b")])
def test_a_version_1_record_reads_back_to_the_same_servings(unit_facts, facts, model):
    plan = plan_for(unit_facts(facts), model, specfleet_serve_extra_args=["--enforce-eager"]
                    if facts != "dgx-spark" else [])
    assert not plan["refused"], plan["reasons"]
    for spec in (plan["serving"], plan["baseline_serving"]):
        placed = serving.for_unit(spec, {"HF_HUB_OFFLINE": "1"}, ["/a:/b"], ["HF_TOKEN"])
        v1 = {key: placed[key] for key in ("kind", "image", "env", "mounts", "secret_env_names", "spec_id")}
        v1["args"] = serving.argv(placed)
        if serving.files(placed):
            v1["files"] = serving.files(placed)
        record = release.parse(json.dumps({"version": 1, "current": v1, "known_good": v1, "decisions": {}}))
        read = record["known_good"]
        # The same serving: the same id, command line, files and speculation (a baseline's
        # own flags and the user's cannot be told apart in a command line, and need not be).
        assert read["spec_id"] == serving.spec_id(read) == placed["spec_id"]
        assert (serving.argv(read), serving.files(read)) == (serving.argv(placed), serving.files(placed))
        assert serving.speculation(read) == serving.speculation(placed)
        assert read["port"] == placed["port"] and read["model"] == placed["model"]


def test_an_unreadable_version_1_serving_is_no_known_good():
    broken = {"kind": "baseline", "image": "i", "args": ["python", "-m", "http.server"], "env": {}, "mounts": [],
              "secret_env_names": [], "spec_id": "x"}
    record = release.parse(json.dumps({"version": 1, "current": broken, "known_good": broken, "decisions": {}}))
    assert record["known_good"] is None and record["version"] == release.RECORD_VERSION


def test_the_trtllm_planner_builds_a_trtllm_serving():
    policy = {"specfleet_port": 8123, "specfleet_max_model_len": {"dgx_spark": 8}}
    spec = plan_trtllm.serving("baseline", "img", "m", policy, "dgx_spark", {"x": 1}, 4)
    flags = dict(serving.engine_flags(spec))
    assert flags["--port"] == "8123" and flags["--max_batch_size"] == "4"


def test_required_memory_is_what_vllm_asks_for_at_start(unit_facts):
    facts = unit_facts("thor-r38")
    plan = plan_for(facts, "nvidia/Llama-3.1-8B-Instruct-FP4")
    # 0.80 x the unit's memory for the speculative serving, 0.85 x for its baseline, rounded up.
    assert serving.required_mib(plan["serving"], facts["memory_mb"]) == -(-facts["memory_mb"] * 80 // 100)
    assert serving.required_mib(plan["baseline_serving"], facts["memory_mb"]) == -(-facts["memory_mb"] * 85 // 100)
    assert serving.required_mib(plan["serving"], None) == 0
    assert serving.required_mib({**plan["serving"], "engine": "trtllm"}, facts["memory_mb"]) == 0
