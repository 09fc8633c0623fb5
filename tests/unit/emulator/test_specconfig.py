"""--speculative-config validation texts (vLLM 0.20, vllm/config/speculative.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DRAFT_1B, EAGLE3, TARGET, TARGET_FP4, stand_in_configs
from vllm_emulator.errors import StartupFailure
from vllm_emulator.hub import ModelInfo, parse_model_info
from vllm_emulator.specconfig import SpecConfigError, dynamic_sd_lookup, validate_speculative_config

from specfleet import batch_table
from tests.conftest import plan_for

CONFIGS = stand_in_configs()


def model(name: str, **overrides: Any) -> ModelInfo:
    return parse_model_info(name, Path("/models") / name, {**CONFIGS[name], **overrides})


def resolve(raw: Any, load: Any = None) -> Any:
    loader = load or (lambda name: model(name))
    return validate_speculative_config(raw, model(TARGET), 1, loader)


def error_text(raw: Any, load: Any = None) -> str:
    with pytest.raises(SpecConfigError) as caught:
        resolve(raw, load)
    return caught.value.text


def test_unknown_method_is_a_literal_error() -> None:
    text = error_text({"method": "eagle4", "num_speculative_tokens": 3})
    assert "1 validation error for SpeculativeConfig" in text
    assert "method\n  Input should be 'ngram'" in text
    assert "[type=literal_error, input_value='eagle4', input_type=str]" in text


def test_missing_num_speculative_tokens() -> None:
    for raw in ({"method": "eagle3", "model": EAGLE3}, {"method": "ngram"}):
        assert (
            "Value error, num_speculative_tokens must be provided with speculative model "
            "unless the draft model config contains an n_predict parameter."
        ) in error_text(raw)


def test_n_predict_supplies_num_speculative_tokens() -> None:
    def load(name: str) -> ModelInfo:
        return model(DRAFT_1B, n_predict=2, model_type="deepseek_mtp")

    resolved = resolve({"model": DRAFT_1B}, load)
    assert resolved.method == "mtp" and resolved.num_speculative_tokens == 2


def test_prompt_lookup_min_above_max() -> None:
    text = error_text({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 6, "prompt_lookup_max": 2})
    assert "Value error, prompt_lookup_min=6 must be <= prompt_lookup_max=2" in text
    assert text.startswith("pydantic_core._pydantic_core.ValidationError")


def test_tensor_parallel_size_key() -> None:
    text = error_text({"method": "ngram", "num_speculative_tokens": 3, "tensor_parallel_size": 1})
    assert (
        "'tensor_parallel_size' is not a valid argument in the speculative_config. "
        "Please pass 'draft_tensor_parallel_size' instead."
    ) in text


def test_num_speculative_tokens_without_model() -> None:
    for method in ("eagle3", "draft_model", "eagle"):
        text = error_text({"method": method, "num_speculative_tokens": 5})
        assert "num_speculative_tokens was provided but without speculative model." in text


def test_unknown_key_and_non_positive_k_are_field_errors() -> None:
    text = error_text({"method": "ngram", "num_speculative_tokens": 0, "temperature": 0.0})
    assert "2 validation errors for SpeculativeConfig" in text
    assert "temperature\n  Unexpected keyword argument" in text
    assert "num_speculative_tokens\n  Input should be greater than 0" in text


def test_not_a_json_object() -> None:
    assert "Input should be a dictionary" in error_text([1, 2])


def test_ngram_defaults_and_repr() -> None:
    resolved = resolve({"method": "ngram", "num_speculative_tokens": 3})
    assert (resolved.prompt_lookup_min, resolved.prompt_lookup_max) == (5, 5)
    assert resolved.vllm_repr() == ("SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3)")
    assert not resolved.async_scheduling
    one_sided = resolve({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    assert (one_sided.prompt_lookup_min, one_sided.prompt_lookup_max) == (4, 4)


def test_eagle3_resolution_and_auto_detection() -> None:
    explicit = resolve({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 5})
    assert explicit.vllm_repr() == (f"SpeculativeConfig(method='eagle3', model='{EAGLE3}', num_spec_tokens=5)")
    assert explicit.async_scheduling and explicit.uses_draft_kv_cache
    detected = resolve({"model": EAGLE3, "num_speculative_tokens": 3})
    assert detected.method == "eagle3"
    assert resolve({"model": DRAFT_1B, "num_speculative_tokens": 3}).method == "draft_model"
    assert resolve({"model": "ngram", "num_speculative_tokens": 3}).method == "ngram"


def test_draft_tensor_parallel_and_vocab_checks() -> None:
    text = error_text(
        {"method": "draft_model", "model": DRAFT_1B, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}
    )
    assert (
        "speculative_draft_tensor_parallel_size=2 cannot be other value than 1 or target model tensor_parallel_size=1"
    ) in text

    def other_vocab(name: str) -> ModelInfo:
        return model(DRAFT_1B, vocab_size=32000)

    text = error_text({"method": "draft_model", "model": DRAFT_1B, "num_speculative_tokens": 3}, other_vocab)
    assert "Target and draft model should have the same vocabulary size." in text


def test_suffix_needs_arctic_inference() -> None:
    text = error_text({"method": "suffix"})
    assert text.startswith("ImportError: Arctic Inference is required for suffix decoding.")


def test_missing_draft_propagates_hub_failure() -> None:
    def missing(name: str) -> ModelInfo:
        raise StartupFailure(exception_text="huggingface_hub.errors.LocalEntryNotFoundError: x")

    with pytest.raises(StartupFailure):
        resolve({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3}, missing)


@pytest.mark.parametrize(
    "raw,needle",
    [
        (
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 6, "prompt_lookup_max": 2},
            "prompt_lookup_min=6 must be <= prompt_lookup_max=2",
        ),
        (
            {"method": "eagle3", "num_speculative_tokens": 5},
            "num_speculative_tokens was provided but without speculative model.",
        ),
    ],
)
def test_spec_errors_end_the_process(launch: Any, raw: dict[str, Any], needle: str) -> None:
    process = launch(TARGET, ["--speculative-config", json.dumps(raw)], ready=False)
    assert process.wait_exit() == 1
    assert needle in "\n".join(process.stderr)
    assert "Application startup complete." not in process.output


# --- keys by version ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.14.0", "0.15.1"])
def test_disable_by_batch_size_is_taken_before_its_removal(version: str) -> None:
    raw = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3, "disable_by_batch_size": 4}
    assert validate_speculative_config(raw, model(TARGET), 1, model, vllm_version=version).method == "eagle3"


@pytest.mark.parametrize("version", ["0.16.0", "0.20.2", "0.26.0", "0.31.0"])
def test_disable_by_batch_size_is_refused_after_vllm_35060(version: str) -> None:
    """Removed by vllm-project/vllm PR #35060 (v0.16.0 or v0.17.0: refused from 0.16.0 on)."""
    raw = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3, "disable_by_batch_size": 4}
    with pytest.raises(SpecConfigError) as caught:
        validate_speculative_config(raw, model(TARGET), 1, model, vllm_version=version)
    assert "1 validation error for SpeculativeConfig" in caught.value.text
    assert (
        "disable_by_batch_size\n  Unexpected keyword argument [type=unexpected_keyword_argument, "
        "input_value=4, input_type=int]"
    ) in caught.value.text


# --- what the plan sends, on the vLLM its image runs -----------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "target", "version"),
    [
        ("thor-r38", TARGET_FP4, "0.26.0"),
        ("agx-orin-64gb-r39", TARGET, "0.26.0"),
        ("agx-orin-64gb-r36", TARGET, "0.14.0"),
        ("orin-nx-16gb-r36", TARGET_FP4, "0.14.0"),
    ],
)
def test_the_emulated_image_takes_what_the_plan_sends(unit_facts: Any, fixture: str, target: str,
                                                       version: str) -> None:
    """The lab emulates each image's vllm_version (lab/specfleet_lab/images.py): the plan's
    --speculative-config, and its per-batch-size table where the plan offers one, start there."""
    plan = plan_for(unit_facts(fixture), target)
    assert plan["vllm_version"] == version
    resolved = validate_speculative_config(plan["speculative"], model(target), 1, model, vllm_version=version)
    assert (resolved.method, resolved.num_speculative_tokens) == (
        plan["speculative"]["method"], plan["speculative"]["num_speculative_tokens"])
    bands = batch_table.table(plan["speculative"]["num_speculative_tokens"],
                              {"speculate_up_to": 1, "max_batch": 8})
    with_table = batch_table.with_table(plan["serving"], bands)["speculative_config"]
    if plan["batch_table"]:
        table = validate_speculative_config(with_table, model(target), 1, model, vllm_version=version)
        lookup = dynamic_sd_lookup(table.num_speculative_tokens_per_batch_size, plan["batch_table"]["max_batch"],
                                   table.num_speculative_tokens)
        assert lookup is not None and lookup[1] == resolved.num_speculative_tokens and set(lookup[2:]) == {0}
    else:
        # No table is planned where the image's vLLM would refuse the key.
        with pytest.raises(SpecConfigError, match="num_speculative_tokens_per_batch_size"):
            validate_speculative_config(with_table, model(target), 1, model, vllm_version=version)
