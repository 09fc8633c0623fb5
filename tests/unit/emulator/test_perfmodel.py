"""Performance-model properties: acceptance curves, step costs, noise."""

from __future__ import annotations

import pytest
from vllm_emulator.engine import NoiseModel
from vllm_emulator.perfmodel import (
    ACCEPTANCE_PROFILES,
    DEVICE_PROFILES,
    WORKLOADS,
    acceptance_rates,
    conditional_rates,
    detect_workload,
    mean_acceptance_length,
    ngram_match_rate,
    startup_phases,
)


def test_acceptance_curves_are_non_increasing_probabilities() -> None:
    for method in ACCEPTANCE_PROFILES:
        for workload in WORKLOADS:
            rates = acceptance_rates(method, workload, 10)
            assert len(rates) == 10
            assert all(0 <= r <= 1 for r in rates)
            assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


def test_conditional_rates_reproduce_unconditional() -> None:
    rates = acceptance_rates("eagle3", "code_edit", 5)
    reached, rebuilt = 1.0, []
    for conditional in conditional_rates(rates):
        reached *= conditional
        rebuilt.append(reached)
    assert rebuilt == pytest.approx(rates)
    assert mean_acceptance_length([0.5, 0.4, 0.33]) == pytest.approx(2.23)


def test_temperature_lowers_acceptance() -> None:
    greedy = acceptance_rates("eagle3", "code_edit", 3)
    sampled = acceptance_rates("eagle3", "code_edit", 3, temperature=1.0)
    assert all(s < g for s, g in zip(sampled, greedy, strict=True))


def test_eagle3_drafts_chat_as_published_and_a_given_curve_replaces_it() -> None:
    """MT-Bench's 3.32 at k=5 (vllm#20780); a fault switch's curve (the poor chat head) is
    continued past its last position by its own last ratio."""
    assert mean_acceptance_length(acceptance_rates("eagle3", "chat", 5)) == pytest.approx(3.32, abs=0.02)
    assert mean_acceptance_length(acceptance_rates("eagle3", "code_edit", 5)) > 2.5
    weak = acceptance_rates("eagle3", "chat", 5, profile=(0.16, 0.02, 0.01))
    assert weak == pytest.approx([0.16, 0.02, 0.01, 0.005, 0.0025])


def test_ngram_match_rate_depends_on_overlap_and_lookup() -> None:
    assert ngram_match_rate("code_edit", 5) > ngram_match_rate("chat", 5)
    assert ngram_match_rate("code_edit", 2) > ngram_match_rate("code_edit", 5)


def test_workload_rule() -> None:
    assert detect_workload("```python\nprint(1)\n```") == "code_edit"
    assert detect_workload("Give me a table of Jetson modules") == "structured"
    assert detect_workload("How are you today?") == "chat"


def test_startup_phases_cache_and_eager() -> None:
    thor = DEVICE_PROFILES["thor"]
    cold = startup_phases(thor, 15.0, 0.0, False, compile_cache_hit=False, enforce_eager=False)
    warm = startup_phases(thor, 15.0, 0.0, False, compile_cache_hit=True, enforce_eager=False)
    eager = startup_phases(thor, 15.0, 0.0, False, compile_cache_hit=False, enforce_eager=True)
    assert cold["compile"] == pytest.approx(40.0) and warm["compile"] == pytest.approx(4.5)
    assert eager["compile"] == 0 and eager["graph_capture"] == 0
    # seed 003: an 8B model starts in ~20-25 s on Thor with a warm cache
    assert 18 <= sum(warm.values()) <= 27


def test_noise_is_seeded_per_unit() -> None:
    quiet = NoiseModel.for_unit("thor-01", 0.0)
    assert quiet.unit_factor == 1.0 and quiet.request_factor(3) == 1.0
    a, b = NoiseModel.for_unit("thor-01", 0.03), NoiseModel.for_unit("thor-02", 0.03)
    assert a == NoiseModel.for_unit("thor-01", 0.03)
    assert a.unit_factor != b.unit_factor
    factors = [a.request_factor(i) for i in range(200)]
    spread = (sum((f - 1) ** 2 for f in factors) / len(factors)) ** 0.5
    assert 0.015 < spread < 0.05
