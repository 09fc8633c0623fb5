"""specfleet.paired: the interleaved ratio-of-sums contrast under the gate, and its two-level variance."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from specfleet import paired

A, B = paired.BASELINE, paired.SPECULATIVE
TOKENS = 100.0


def test_weights_compare_each_speculative_block_with_its_neighbours():
    assert paired.contrast_weights([A, B, A]) == [-0.5, 1.0, -0.5]
    assert paired.contrast_weights([A, B, A, B, A]) == [-0.25, 0.5, -0.5, 0.5, -0.25]
    assert paired.contrast_weights([A, B]) == [-1.0, 1.0]
    with pytest.raises(ValueError):
        paired.contrast_weights([A, A])
    # Two baseline blocks: the change; three or more: each against its neighbours' mean.
    assert paired.drift_weights([A, B, A]) == [[-1.0, 0.0, 1.0]]
    assert paired.drift_weights([A, B, A, B, A]) == [[-0.5, 0.0, 1.0, 0.0, -0.5]]
    assert paired.drift_weights([A, B]) == []


def blocks(speedups, drift_per_block: float, sides, noise=0.0, block_noise=0.0, seed=1):
    """Blocks of prompt -> (time, tokens): prompt i takes 10 + i time units a token on the
    baseline and speedups[i] times less speculating, times drift and noise."""
    generator = random.Random(seed)
    out = []
    for index, side in enumerate(sides):
        shared = math.exp(generator.gauss(0, block_noise)) * (1.0 + drift_per_block) ** index
        out.append({f"p{i}": ((10.0 + i) * TOKENS * shared * math.exp(generator.gauss(0, noise))
                              / (speed if side == B else 1.0), TOKENS)
                    for i, speed in enumerate(speedups)})
    return out


def test_a_linear_drift_cancels_and_the_ratio_is_found():
    sides = [A, B, A]
    found = paired.estimate(blocks([1 / 0.7] * 32, 0.03, sides), sides, paired.contrast_weights(sides), 0.0)
    assert found.ratio == pytest.approx(0.7, rel=1e-9) and found.prompts == 32
    (weights,) = paired.drift_weights(sides)
    drift = paired.estimate(blocks([1 / 0.7] * 32, 0.03, sides), sides, weights, 0.0)
    assert drift.ratio == pytest.approx(1.03 ** 2, rel=1e-9)


def test_prompts_that_draft_unequally_are_weighed_by_their_time():
    # Half the prompts 2.5x faster, half 0.9x: the set's throughput ratio is total time over
    # total time, not the mean of per-prompt ratios (that would say ~1.5x).
    speedups = [2.5 if i % 2 else 0.9 for i in range(40)]
    truth = sum(10.0 + i for i in range(40)) / sum((10.0 + i) / s for i, s in enumerate(speedups))
    sides = [A, B, A]
    found = paired.estimate(blocks(speedups, 0.0, sides), sides, paired.contrast_weights(sides), 0.0)
    assert 1 / found.ratio == pytest.approx(truth, rel=1e-9)
    assert truth == pytest.approx(1.33, abs=0.01)
    assert statistics.fmean(math.log(s) for s in speedups) > math.log(truth) + 0.1


def test_the_standard_error_is_what_repeated_units_show():
    sides = [A, B, A, B, A]
    estimates, errors = [], []
    for seed in range(300):
        data = blocks([1.4] * 40, 0.0, sides, noise=0.08, block_noise=0.02, seed=seed)
        found = paired.estimate(data, sides, paired.contrast_weights(sides), 0.02)
        estimates.append(found.log_ratio)
        errors.append(found.se)
    assert statistics.fmean(estimates) == pytest.approx(-math.log(1.4), abs=0.004)
    assert statistics.fmean(errors) == pytest.approx(statistics.stdev(estimates), rel=0.25)


def test_with_no_request_noise_the_block_level_alone_remains():
    sides = [A, B, A]
    quiet = paired.estimate(blocks([1.4] * 32, 0.0, sides), sides, paired.contrast_weights(sides), 0.02)
    # The policy's 2 % per block, over weights -1/2, 1, -1/2: 2% x sqrt(1.5).
    assert quiet.se == pytest.approx(0.02 * math.sqrt(1.5), rel=1e-6)


def test_more_blocks_narrow_the_bound_and_replicates_that_disagree_widen_it():
    sides3, sides7 = [A, B, A], [A, B, A, B, A, B, A]
    three = paired.estimate(blocks([1.4] * 40, 0.0, sides3, noise=0.08), sides3, paired.contrast_weights(sides3), 0.02)
    seven = blocks([1.4] * 40, 0.0, sides7, noise=0.08)
    calm = paired.estimate(seven, sides7, paired.contrast_weights(sides7), 0.02)
    assert calm.se < three.se and three.lower(0.9) < three.ratio < three.upper(0.9)
    # Each B block's own comparison 12 % apart from the next: far more than the policy's 2 %.
    for index, factor in ((1, 1.12), (3, 0.88), (5, 1.12)):
        seven[index] = {prompt: (time * factor, tokens) for prompt, (time, tokens) in seven[index].items()}
    wide = paired.estimate(seven, sides7, paired.contrast_weights(sides7), 0.02)
    assert wide.se > 2 * calm.se


def test_the_block_variance_is_the_spread_of_the_replicates_beyond_their_requests():
    sides = [A, B, A, B, A]
    assert paired.replicate_weights(sides) == [[-0.5, 1.0, -0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 1.0, -0.5]]
    # Replicates 0.10 and -0.10 apart from their mean: spread 0.02 over tr(M C C^T) = 1.25, one
    # degree of freedom, pooled with the floor worth two.
    levels = [0.0, 0.1, 0.0, -0.1, 0.0]
    assert paired.block_variance(levels, sides, [0.0] * 5, 0.02) == pytest.approx((2 * 0.0004 + 0.02 / 1.25) / 3)
    # The requests' own noise explains part of the spread.
    assert paired.block_variance(levels, sides, [0.004] * 5, 0.02) == pytest.approx(
        (2 * 0.0004 + (0.02 - 0.004 * 1.25) / 1.25) / 3)


def test_the_block_variance_is_never_below_the_policy_figure():
    assert paired.block_variance([0.0, 0.1, 0.0], [A, B, A], [0.0] * 3, 0.02) == pytest.approx(0.0004)
    # Levels exactly on a line: the data say no block noise; the policy's floor stays.
    assert paired.block_variance([0.0, 0.1, 0.02, 0.13, 0.04], [A, B, A, B, A], [0.0] * 5, 0.02) == \
        pytest.approx(0.0004)


def test_request_noise_is_pooled_over_cells_and_borrowed_by_a_side_measured_once():
    sides = [A, B, A]
    cells = [blocks([1.4] * 40, 0.0, sides, noise=0.08, seed=seed) for seed in range(8)]
    found = paired.noise_by_side(cells, sides)
    assert found[A] == found[B] == pytest.approx(0.08 ** 2, rel=0.3)
    assert paired.noise_by_side([[{"p0": (1.0, 1.0)}] * 3], sides) == {A: math.inf, B: math.inf}


def test_a_step_inside_a_block_shows_at_the_point_nearest_it():
    sides = [A, B, A]
    data = blocks([1.4] * 40, 0.0, sides, noise=0.02)
    prompts = paired.common_prompts(data)
    noise = paired.noise_by_side([data], sides)[A]
    steady = [found for found, _, _ in paired.step_within(data[0], data[2], prompts, noise)]
    assert len(steady) == paired.STEP_SPLITS - 1 and all(abs(found.log_ratio) < 4 * found.se for found in steady)
    for prompt in prompts[25:]:  # the second baseline block 15 % slower from its 26th request on
        time, tokens = data[2][prompt]
        data[2][prompt] = (time * 1.15, tokens)
    stepped = paired.step_within(data[0], data[2], prompts, noise)
    largest, share, _ = max(stepped, key=lambda item: abs(item[0].log_ratio) / item[0].se)
    assert [found for found, _, _ in stepped].index(largest) == 4  # after 25 of 40: the split there (5, 10, ... 35)
    # The share of the earlier block's time before that point.
    assert share == pytest.approx(sum(10 + i for i in range(25)) / sum(10 + i for i in range(40)), rel=0.05)
    assert largest.ratio == pytest.approx(1.15, rel=0.03) and largest.lower(0.95) > 1.08
    # A cold start: the first 5 requests of the first block 40 % slower.
    cold = blocks([1.4] * 40, 0.0, sides, noise=0.02)
    for prompt in prompts[:5]:
        time, tokens = cold[0][prompt]
        cold[0][prompt] = (time * 1.4, tokens)
    first, _, _ = paired.step_within(cold[0], cold[2], prompts, noise)[0]
    assert first.ratio == pytest.approx(1.4, rel=0.05) and first.lower(0.99) > 1.2


def test_only_prompts_every_block_measured_are_compared():
    sides = [A, B, A]
    data = blocks([1.4] * 5, 0.0, sides)
    del data[1]["p0"]
    data[2]["p1"] = (0.0, TOKENS)  # no time: not measured
    assert paired.estimate(data, sides, paired.contrast_weights(sides), 0.0).prompts == 3
    single = [{"p0": (1.0, 1.0)}] * 3
    assert paired.estimate(single, sides, paired.contrast_weights(sides), 0.0) is None


def test_a_steady_drift_cancels_in_the_drift_of_three_baseline_blocks_and_a_step_shows():
    sides = [A, B, A, B, A]
    (weights,) = paired.drift_weights(sides)
    steady = paired.estimate(blocks([1.4] * 40, 0.03, sides), sides, weights, 0.0)
    assert steady.ratio == pytest.approx(1.0, abs=1e-9)
    stepped = blocks([1.4] * 40, 0.0, sides)
    for index in (2, 3, 4):  # 10% slower from the second baseline block on
        stepped[index] = {prompt: (time * 1.1, tokens) for prompt, (time, tokens) in stepped[index].items()}
    assert paired.estimate(stepped, sides, weights, 0.0).ratio == pytest.approx(1.1 ** 0.5, rel=1e-6)


def test_a_stalled_request_is_given_its_prompts_time_in_the_sides_other_blocks():
    sides = [A, B, A, B, A]
    data = blocks([1.4] * 40, 0.0, sides, noise=0.03)
    clean = paired.estimate(data, sides, paired.contrast_weights(sides), 0.0)
    time, tokens = data[2]["p7"]
    data[2]["p7"] = (time + 40 * 100.0, tokens)  # seconds of pause in the second baseline block
    assert paired.stalls(data, sides) == {(2, "p7")}
    mended = paired.cleaned(data, sides)
    # Every prompt stays (the set is the thresholds' figure); p7 takes its time elsewhere.
    assert mended[2]["p7"][0] == pytest.approx(time, rel=0.1) and mended[0] == data[0]
    found = paired.estimate(mended, sides, paired.contrast_weights(sides), 0.0)
    assert found.prompts == 40 and found.log_ratio == pytest.approx(clean.log_ratio, abs=0.005)


def test_stalls_stay_in_while_one_side_was_measured_once():
    # A B A: the speculative block's own stalls cannot be found (no second block of its side to
    # hold it against), so cleaning only the baseline's would favour speculation.
    sides = [A, B, A]
    data = blocks([1.4] * 40, 0.0, sides, noise=0.03)
    clean = paired.estimate(data, sides, paired.contrast_weights(sides), 0.0)
    total = sum(time for time, _ in data[2].values())
    time, tokens = data[2]["p7"]
    data[2]["p7"] = (time + 40 * 100.0, tokens)
    assert paired.stalls(data, sides) == {(2, "p7")}
    assert paired.cleaned(data, sides) == data
    assert paired.cleaned(data, sides, either_side=True)[2]["p7"][0] == pytest.approx(time, rel=0.1)
    found = paired.estimate(paired.cleaned(data, sides), sides, paired.contrast_weights(sides), 0.0)
    # The baseline's stall counts against it, by its share of that block's time (weight 1/2).
    assert found.prompts == 40
    assert found.log_ratio == pytest.approx(clean.log_ratio - 0.5 * math.log1p(4000.0 / total), rel=1e-9)


def test_a_prompt_speculation_truly_slows_is_no_stall():
    # Only blocks of one side are held against each other: 4 of 40 prompts at 0.6x while the
    # others gain 1.45x are the speculative serving's doing, and stay as measured.
    sides = [A, B, A, B, A]
    speedups = [0.6 if i % 10 == 0 else 1.45 for i in range(40)]
    data = blocks(speedups, 0.0, sides, noise=0.03)
    assert paired.stalls(data, sides) == set()
    found = paired.estimate(paired.cleaned(data, sides), sides, paired.contrast_weights(sides), 0.02)
    assert found.prompts == 40 and 1 / found.ratio < 1.3
    unequal = blocks([2.5 if i % 2 else 0.9 for i in range(40)], 0.0, sides, noise=0.03)
    assert paired.stalls(unequal, sides) == set()


def test_the_placebo_block_noise_sees_a_wander_not_a_steady_drift():
    assert paired.placebo_block_noise([0.0], 0.02) == 0.02
    assert paired.placebo_block_noise([0.0, 0.03, 0.06, 0.09, 0.12], 0.02) == pytest.approx(0.02)  # steady
    wander = paired.placebo_block_noise([0.0, 0.06, 0.0, 0.06, 0.0], 0.02)
    assert wander == pytest.approx(math.sqrt((2 * 0.02 ** 2 + 3 * 0.06 ** 2 / 1.5) / 5))


def test_a_moves_exposure_is_the_most_weight_its_side_or_a_lasting_step_has():
    aba, ababa = [A, B, A], [A, B, A, B, A]
    assert paired.exposure(paired.contrast_weights(aba), aba, A) == pytest.approx(0.5)
    assert paired.exposure(paired.contrast_weights(aba), aba, B) == pytest.approx(1.0)
    # Two replicates: a baseline block in the middle weighs 1/2, a step from it on 1/4.
    assert paired.exposure(paired.contrast_weights(ababa), ababa, A) == pytest.approx(0.5)
    assert paired.exposure(paired.contrast_weights(ababa), ababa, B) == pytest.approx(0.5)


def test_on_three_blocks_the_two_baseline_blocks_are_the_block_levels_one_repeat():
    sides = [A, B, A]
    # Baseline blocks 6 % apart: half its square is what one block's level varies by, pooled
    # with the floor (worth two).
    assert paired.block_variance([0.0, -0.3, 0.06], sides, [0.0] * 3, 0.02) == pytest.approx(
        (2 * 0.0004 + 0.06 ** 2 / 2) / 3)
    # What their requests' noise explains is taken off first.
    assert paired.block_variance([0.0, -0.3, 0.06], sides, [0.001] * 3, 0.02) == pytest.approx(
        (2 * 0.0004 + (0.06 ** 2 - 0.002) / 2) / 3)


def test_a_guard_gives_a_side_measured_once_the_spread_of_its_changes():
    sides = [A, B, A]
    data = blocks([1.0] * 40, 0.0, sides, noise=0.03)
    noise = paired.noise_by_side([data], sides)
    assert paired.with_spread(data, sides, noise)[B] == pytest.approx(noise[B], rel=0.6)
    time, tokens = data[1]["p3"]
    data[1]["p3"] = (time * 4, tokens)  # a stall in the one speculative block
    widened = paired.with_spread(data, sides, noise)
    assert widened[A] == noise[A] and widened[B] > 10 * noise[B]


def test_a_cold_start_is_mended_and_neither_a_stall_nor_a_step_elsewhere_reads_as_one():
    sides = [A, B, A, B, A]
    data = blocks([1.4] * 40, 0.0, sides, noise=0.02)
    clean = paired.estimate(data, sides, paired.contrast_weights(sides), 0.02)
    cold = [dict(block) for block in data]
    for position, prompt in enumerate(list(cold[0])[:6]):  # the first requests up to 40 % slower
        time, tokens = cold[0][prompt]
        cold[0][prompt] = (time * (1 + 0.4 * math.exp(-position / 3)), tokens)
    assert {prompt for index, prompt in paired.cold_starts(cold, sides) if index == 0} >= {"p0", "p1", "p2"}
    mended = paired.estimate(paired.cleaned(cold, sides), sides, paired.contrast_weights(sides), 0.02)
    assert mended.log_ratio == pytest.approx(clean.log_ratio, abs=0.003)
    # One stall among the first requests is a stall, not a cold start.
    stalled = [dict(block) for block in data]
    time, tokens = stalled[2]["p3"]
    stalled[2]["p3"] = (time * 3, tokens)
    assert paired.cold_starts(stalled, sides) == set()
    # The second baseline block slower from its 6th request on: the first block's start is no
    # cold start for reading faster than it.
    stepped = [dict(block) for block in data]
    for prompt in list(stepped[2])[5:]:
        time, tokens = stepped[2][prompt]
        stepped[2][prompt] = (time * 1.1, tokens)
    assert paired.cold_starts(stepped[:3], sides[:3]) == set()
    # A side measured once is not searched, but the other side's cold start is mended.
    assert paired.cleaned(cold[:3], sides[:3])[0]["p0"][0] < cold[0]["p0"][0] / 1.2
