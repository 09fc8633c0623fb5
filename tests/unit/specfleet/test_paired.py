"""specfleet.paired: the paired, interleaved contrast under the gate."""

from __future__ import annotations

import math
import random

import pytest

from specfleet import paired

A, B = paired.BASELINE, paired.SPECULATIVE


def test_weights_compare_each_speculative_block_with_its_neighbours():
    assert paired.contrast_weights([A, B, A]) == [-0.5, 1.0, -0.5]
    assert paired.contrast_weights([A, B, A, B, A]) == [-0.25, 0.5, -0.5, 0.5, -0.25]
    assert paired.contrast_weights([A, B]) == [-1.0, 1.0]
    with pytest.raises(ValueError):
        paired.contrast_weights([A, A])
    assert paired.drift_weights([A, B, A, B, A]) == [[-1.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0, 1.0]]
    assert paired.drift_weights([A, B]) == []


def blocks(ratio: float, drift_per_block: float, sides, prompts=32, noise=0.0, seed=1):
    generator = random.Random(seed)
    base = {f"p{i}": 10.0 + i for i in range(prompts)}
    out = []
    for index, side in enumerate(sides):
        factor = (1.0 + drift_per_block) ** index * (ratio if side == B else 1.0)
        out.append({p: v * factor * math.exp(generator.gauss(0, noise)) for p, v in base.items()})
    return out


def test_a_linear_drift_cancels_and_the_ratio_is_found():
    sides = [A, B, A]
    found = paired.estimate(blocks(0.7, 0.03, sides), paired.contrast_weights(sides), block_noise=0.0)
    assert found.ratio == pytest.approx(0.7, rel=1e-9) and found.prompts == 32
    (weights,) = paired.drift_weights(sides)
    drift = paired.estimate(blocks(0.7, 0.03, sides), weights, block_noise=0.0)
    assert drift.ratio == pytest.approx(1.03 ** 2, rel=1e-9)


def test_bounds_widen_with_noise_and_narrow_with_more_blocks():
    sides3, sides5 = [A, B, A], [A, B, A, B, A]
    noisy = paired.estimate(blocks(0.7, 0.0, sides3, noise=0.08), paired.contrast_weights(sides3), 0.02)
    assert noisy.lower(0.9) < noisy.ratio < noisy.upper(0.9)
    more = paired.estimate(blocks(0.7, 0.0, sides5, noise=0.08), paired.contrast_weights(sides5), 0.02)
    assert more.se < noisy.se
    quiet = paired.estimate(blocks(0.7, 0.0, sides3, noise=0.0), paired.contrast_weights(sides3), 0.02)
    # With no per-request noise the block term alone remains: 2% x sqrt(1.5).
    assert quiet.se == pytest.approx(0.02 * math.sqrt(1.5), rel=1e-6)


def test_a_stalled_request_does_not_move_the_estimate_much():
    sides = [A, B, A]
    data = blocks(0.7, 0.0, sides, noise=0.02)
    data[1]["p3"] *= 5.0  # one request of the speculative block stalled
    found = paired.estimate(data, paired.contrast_weights(sides), 0.0)
    assert found.ratio == pytest.approx(0.7, rel=0.02)


def test_prompts_missing_from_a_block_are_left_out():
    sides = [A, B, A]
    data = blocks(0.7, 0.0, sides, prompts=4)
    del data[2]["p0"]
    assert paired.estimate(data, paired.contrast_weights(sides), 0.0).prompts == 3
    assert paired.estimate([{"p0": 1.0}, {"p0": 1.0}, {"p0": 1.0}], paired.contrast_weights(sides), 0.0) is None
