"""KServe InferenceService manifests from plans (issue 8; seed 002's patterns and constraints)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from specfleet import kserve
from specfleet.catalog import load_catalog
from tests.conftest import REPO, plan_for

CATALOG = load_catalog()
TARGET_URI = "hf://meta-llama/Llama-3.1-8B-Instruct"
DRAFT_URI = "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


@pytest.fixture
def eagle3_plan(unit_facts) -> dict:
    plan = plan_for(unit_facts("agx-orin-64gb-r39"), "meta-llama/Llama-3.1-8B-Instruct")
    assert plan["speculative"]["method"] == "eagle3", plan["reasons"]
    return plan


@pytest.fixture
def ngram_plan(unit_facts) -> dict:
    plan = plan_for(unit_facts("orin-nx-16gb-r36"), "meta-llama/Llama-3.2-1B-Instruct")
    assert plan["speculative"]["method"] == "ngram", plan["reasons"]
    return plan


def uris(target: str = "/mnt/models/target", draft: str = "/mnt/models/draft") -> dict:
    return {"target": kserve.StorageEntry(TARGET_URI, target), "draft": kserve.StorageEntry(DRAFT_URI, draft)}


def reparse(manifest: dict) -> dict:
    """What kubectl would read: the manifest through PyYAML and back."""
    parsed = yaml.safe_load(kserve.to_yaml(manifest))
    assert parsed == manifest
    return parsed


def model_of(manifest: dict) -> dict:
    return manifest["spec"]["predictor"]["model"]


def spec_config(manifest: dict) -> dict | None:
    found = [a.split("=", 1)[1] for a in model_of(manifest)["args"] if a.startswith("--speculative-config=")]
    return json.loads(found[0]) if found else None


def arg(manifest: dict, flag: str) -> str | None:
    found = [a.split("=", 1)[1] for a in model_of(manifest)["args"] if a.startswith(flag + "=")]
    return found[0] if found else None


def test_ngram_single_artifact(ngram_plan):
    manifest, rollback, _ = kserve.render_pair(
        ngram_plan, kserve.Options(name="llm-ngram", namespace="models", storage_uri="hf://meta-llama/Llama-3.2-1B")
    )
    manifest = reparse(manifest)
    assert kserve.validate(manifest) == []
    assert (manifest["apiVersion"], manifest["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    assert manifest["metadata"]["name"] == "llm-ngram" and manifest["metadata"]["namespace"] == "models"
    model = model_of(manifest)
    assert model["modelFormat"] == {"name": "vLLM"}
    assert model["storageUri"] == "hf://meta-llama/Llama-3.2-1B"
    assert "storageUris" not in manifest["spec"]["predictor"]
    # The single artifact lands at /mnt/models (seed 002) and vLLM is pointed there.
    assert arg(manifest, "--model") == "/mnt/models"
    assert spec_config(manifest) == ngram_plan["speculative"]
    # No draft artifact: the plan's memory budget stands.
    assert arg(manifest, "--gpu-memory-utilization") == f"{ngram_plan['gpu_memory_utilization']:.2f}"
    # The runtime owns the command, host and port; the plan's repo id is not a path in the pod.
    assert not any(a.startswith(("--host", "--port")) or a in ("vllm", "serve") for a in model["args"])
    assert all(isinstance(a, str) for a in model["args"])
    assert model["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_eagle3_target_and_draft_with_storage_uris(eagle3_plan):
    manifest, rollback, _ = kserve.render_pair(eagle3_plan, kserve.Options(name="llm-sd", storage_uris=uris()))
    manifest = reparse(manifest)
    assert kserve.validate(manifest) == []
    predictor = manifest["spec"]["predictor"]
    assert predictor["storageUris"] == [
        {"uri": TARGET_URI, "mountPath": "/mnt/models/target"},
        {"uri": DRAFT_URI, "mountPath": "/mnt/models/draft"},
    ]
    assert "storageUri" not in predictor["model"]
    assert arg(manifest, "--model") == "/mnt/models/target"
    config = spec_config(manifest)
    # The head's Hugging Face id is rewritten to where the storage initializer puts it.
    assert config == {**eagle3_plan["speculative"], "model": "/mnt/models/draft"}
    # Seed 002: 0.10 below the baseline with a draft artifact (0.9 -> 0.8), more than the plan's 0.05.
    assert arg(manifest, "--gpu-memory-utilization") == f"{eagle3_plan['baseline_gpu_memory_utilization'] - 0.10:.2f}"
    memory = eagle3_plan["memory"]
    need = memory["target_gib"] + memory["speculator_gib"] + memory["min_kv_gib"] + memory["headroom_gib"]
    requested = int(predictor["model"]["resources"]["requests"]["memory"].removesuffix("Gi"))
    assert need <= requested < need + 1


def test_eagle3_target_and_draft_on_a_pvc(eagle3_plan):
    options = kserve.Options(name="llm-sd", pvc="model-store", runtime="my-vllm-runtime",
                             progress_deadline="10m", runtime_format="huggingface")
    manifest, rollback, _ = kserve.render_pair(eagle3_plan, options)
    manifest = reparse(manifest)
    assert kserve.validate(manifest) == []
    model = model_of(manifest)
    assert model["storageUri"] == "pvc://model-store/"
    assert "storageUris" not in manifest["spec"]["predictor"]
    assert model["runtime"] == "my-vllm-runtime" and model["modelFormat"] == {"name": "huggingface"}
    # The PVC root is /mnt/models; both artifacts in subdirectories named like their repos.
    assert arg(manifest, "--model_dir") == "/mnt/models/Llama-3.1-8B-Instruct"
    assert arg(manifest, "--model_name") == "llm-sd"
    assert spec_config(manifest)["model"] == "/mnt/models/EAGLE3-LLaMA3.1-Instruct-8B"
    assert manifest["metadata"]["annotations"] == {"serving.knative.dev/progress-deadline": "10m"}


def test_rollback_has_no_flag_and_the_baseline_budget(eagle3_plan):
    manifest, rollback, _ = kserve.render_pair(eagle3_plan, kserve.Options(name="llm-sd", storage_uris=uris()))
    rollback = reparse(rollback)
    assert kserve.validate(rollback) == []
    assert spec_config(rollback) is None
    assert not any("speculative" in a for a in model_of(rollback)["args"])
    assert arg(rollback, "--gpu-memory-utilization") == f"{eagle3_plan['baseline_gpu_memory_utilization']:.2f}"
    # Same service, same storage (seed 002: the draft stays mounted, unused); only the flag and budget differ.
    assert rollback["metadata"]["name"] == manifest["metadata"]["name"]
    assert rollback["spec"]["predictor"]["storageUris"] == manifest["spec"]["predictor"]["storageUris"]
    differ = set(model_of(manifest)["args"]) ^ set(model_of(rollback)["args"])
    assert {a.split("=", 1)[0] for a in differ} == {"--speculative-config", "--gpu-memory-utilization"}


def test_args_are_the_plans_flags_in_order(eagle3_plan):
    """The plan's serving flags, one ``--flag=value`` each in the serving's order, the speculative
    config last; the runtime's own flags (host, port) left out."""
    manifest, rollback, _ = kserve.render_pair(eagle3_plan, kserve.Options(name="llm-sd", storage_uris=uris()))
    common = ["--max-model-len=8192", "--max-num-seqs=8", "--seed=42"]
    assert model_of(manifest)["args"] == [
        "--model=/mnt/models/target", "--gpu-memory-utilization=0.75", *common,
        '--speculative-config={"draft_tensor_parallel_size":1,"method":"eagle3","model":"/mnt/models/draft",'
        '"num_speculative_tokens":3}',
    ]
    assert model_of(rollback)["args"] == ["--model=/mnt/models/target", "--gpu-memory-utilization=0.85", *common]


def test_the_users_flags_follow_the_plans(unit_facts):
    plan = plan_for(unit_facts("agx-orin-64gb-r39"), "meta-llama/Llama-3.1-8B-Instruct",
                    specfleet_serve_extra_args=["--dtype", "float32", "--enforce-eager"])
    manifest, rollback, _ = kserve.render_pair(plan, kserve.Options(name="llm-sd", storage_uris=uris()))
    args = model_of(manifest)["args"]
    assert args[-3].startswith("--speculative-config=") and args[-2:] == ["--dtype=float32", "--enforce-eager"]
    assert model_of(rollback)["args"][-3:] == ["--seed=42", "--dtype=float32", "--enforce-eager"]


def test_a_trtllm_plan_is_not_rendered(unit_facts):
    plan = plan_for(unit_facts("dgx-spark"), "openai/gpt-oss-120b")
    assert not plan["refused"] and plan["serving"]["engine"] == "trtllm"
    with pytest.raises(kserve.KServeError, match="serves with trtllm, KServe runs vLLM"):
        kserve.render_pair(plan, kserve.Options(name="x", storage_uri=TARGET_URI))


@pytest.mark.parametrize(
    ("options", "field", "reason"),
    [
        (kserve.Options(name="x", storage_uri=TARGET_URI, storage_uris=uris()), "storage", "mutually exclusive"),
        (kserve.Options(name="x", pvc="store", storage_uris=uris()), "storage", "mutually exclusive"),
        (kserve.Options(name="x", storage_uris=uris(draft="models/draft")),
         "spec.predictor.storageUris[1].mountPath", "relative"),
        (kserve.Options(name="x", storage_uris=uris(target="/models/target", draft="/opt/draft")),
         "spec.predictor.storageUris", "share no parent"),
        (kserve.Options(name="x", storage_uris=uris(target="/mnt/models", draft="/mnt/models/draft")),
         "spec.predictor.storageUris", "holds the other mount"),
        (kserve.Options(name="x", pvc="store", draft_dir="/opt/draft"),
         "spec.predictor.model.args", "outside the common mount parent"),
        (kserve.Options(name="x", storage_uris={"target": uris()["target"]}), "storageUris", "add a draft entry"),
        (kserve.Options(name="x"), "storage", "no model storage"),
        (kserve.Options(name="9-bad_name", storage_uris=uris()), "metadata.name", "DNS-1123"),
        (kserve.Options(name="x", namespace="Models", storage_uris=uris()), "metadata.namespace", "DNS-1123"),
        (kserve.Options(name="x", storage_uris=uris(), progress_deadline="soon"),
         "metadata.annotations.serving.knative.dev/progress-deadline", "duration"),
    ],
)
def test_malformed_input_is_refused_with_the_field_and_reason(eagle3_plan, options, field, reason):
    with pytest.raises(kserve.KServeError) as refused:
        kserve.render_pair(eagle3_plan, options)
    assert any(r.startswith(field) and reason in r for r in refused.value.reasons), refused.value.reasons


def test_refused_plan_is_not_rendered(unit_facts):
    plan = plan_for(unit_facts("orin-nano-8gb-r36"), "nvidia/Llama-3.1-8B-Instruct-FP4")
    assert plan["refused"]
    with pytest.raises(kserve.KServeError, match="refused"):
        kserve.render_pair(plan, kserve.Options(name="x", storage_uri=TARGET_URI))


@pytest.fixture
def good(eagle3_plan) -> dict:
    manifest, _, _ = kserve.render_pair(eagle3_plan, kserve.Options(name="llm-sd", storage_uris=uris()))
    return manifest


def edited(manifest: dict, edit) -> list[str]:
    changed = copy.deepcopy(manifest)
    edit(changed)
    return kserve.validate(changed)


def test_validate_hand_edited_manifests(good):
    predictor = "spec.predictor"
    assert any("mutually exclusive" in p for p in edited(
        good, lambda m: m["spec"]["predictor"]["model"].__setitem__("storageUri", TARGET_URI)))
    assert any(p.startswith(f"{predictor}.storageUris[0].mountPath") and "relative" in p for p in edited(
        good, lambda m: m["spec"]["predictor"]["storageUris"][0].__setitem__("mountPath", "mnt/models/target")))
    assert any("'..'" in p for p in edited(
        good, lambda m: m["spec"]["predictor"]["storageUris"][1].__setitem__("mountPath", "/mnt/models/../draft")))
    assert any("list of strings" in p for p in edited(
        good, lambda m: m["spec"]["predictor"]["model"]["args"].append(8)))

    def draft_elsewhere(m: dict) -> None:
        args = m["spec"]["predictor"]["model"]["args"]
        args[-1] = '--speculative-config={"method":"eagle3","model":"/opt/draft","num_speculative_tokens":3}'
    assert any("outside the common mount parent /mnt/models" in p for p in edited(good, draft_elsewhere))

    def broken_json(m: dict) -> None:
        m["spec"]["predictor"]["model"]["args"][-1] = "--speculative-config={method: eagle3"
    assert any("not JSON" in p for p in edited(good, broken_json))
    assert any("storageUriz: not an InferenceService field" in p for p in edited(
        good, lambda m: m["spec"]["predictor"].__setitem__("storageUriz", [])))
    assert any("no --model" in p for p in edited(
        good, lambda m: m["spec"]["predictor"]["model"]["args"].pop(0)))
    assert any(p.startswith("kind") for p in edited(good, lambda m: m.__setitem__("kind", "Deployment")))


@pytest.mark.parametrize(("host", "name"), [("thor-01", "thor-01"), ("Thor_01.lan", "thor-01-lan"), ("01", "sd-01")])
def test_default_name_is_a_valid_isvc_name(host, name):
    assert kserve.default_name(host) == name


def specfleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specfleet.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_round_trip_on_a_facts_fixture(facts_file, tmp_path):
    out = tmp_path / "manifests"
    result = specfleet("kserve", "render", "--facts", facts_file("agx-orin-64gb-r39"),
                       "--model", "meta-llama/Llama-3.1-8B-Instruct", "--namespace", "llm",
                       "--storage-uris", f"target={TARGET_URI}", "--storage-uris", f"draft={DRAFT_URI}",
                       "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["name"] == "agx-orin-64gb-r39"
    assert sorted(p.name for p in out.iterdir()) == [
        "agx-orin-64gb-r39-inferenceservice.yaml", "agx-orin-64gb-r39-rollback.yaml"]
    manifest = yaml.safe_load((out / "agx-orin-64gb-r39-inferenceservice.yaml").read_text())
    rollback = yaml.safe_load((out / "agx-orin-64gb-r39-rollback.yaml").read_text())
    assert kserve.validate(manifest) == [] and kserve.validate(rollback) == []
    assert spec_config(manifest)["model"] == "/mnt/models/draft"
    assert spec_config(rollback) is None


def test_cli_json_format(facts_file, tmp_path):
    result = specfleet("kserve", "render", "--facts", facts_file("thor-r38"), "--pvc", "store",
                       "--format", "json", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "thor-r38-inferenceservice.json").read_text())
    assert kserve.validate(manifest) == []


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (["--storage-uri", TARGET_URI, "--storage-uris", f"target={TARGET_URI}"], "mutually exclusive"),
        (["--storage-uris", f"target={TARGET_URI}", "--storage-uris", f"draft={DRAFT_URI}",
          "--mount-path", "draft=models/draft"], "relative"),
        (["--storage-uris", "target"], "expected ROLE=VALUE"),
        (["--pvc", "store", "--host", "nope"], "--host nope"),
    ],
)
def test_cli_refuses_malformed_input_and_writes_nothing(facts_file, tmp_path, extra, reason):
    out = tmp_path / "manifests"
    result = specfleet("kserve", "render", "--facts", facts_file("thor-r38"), *extra, "--out", str(out))
    assert result.returncode == 2
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
