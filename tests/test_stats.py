"""Tests of posenc.stats: the t quantile against tables and closed forms, verdicts where the truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.stats import (
    VERDICTS,
    PairedComparison,
    bonferroni_confidence,
    paired_comparison,
    paired_comparisons,
    student_t_cdf,
    student_t_quantile,
)

# ---- the t distribution -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 4, 2.7764),
        (0.975, 9, 2.2622),
        (0.975, 30, 2.0423),
        (0.95, 4, 2.1318),
        (0.995, 4, 4.6041),
        (0.995, 10, 3.1693),
        (0.9, 5, 1.4759),
    ],
)
def test_t_quantile_matches_printed_tables(p, df, table):
    assert student_t_quantile(p, df) == pytest.approx(table, abs=5e-5)


@pytest.mark.parametrize("t", [-7.5, -1.0, -0.2, 0.0, 0.3, 1.0, 2.5, 40.0])
def test_t_cdf_matches_closed_forms_for_one_and_two_degrees_of_freedom(t):
    # df = 1 is the Cauchy distribution; df = 2 has F(t) = 1/2 + t / (2 sqrt(2 + t^2)).
    assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
    assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)


def test_t_quantile_inverts_the_cdf_and_is_antisymmetric():
    for df in (1, 3, 4.5, 12, 200):
        for p in (0.001, 0.05, 0.3, 0.5, 0.8, 0.975, 0.9999):
            t = student_t_quantile(p, df)
            assert student_t_cdf(t, df) == pytest.approx(p, abs=1e-11)
            assert student_t_quantile(1 - p, df) == pytest.approx(-t, rel=1e-10, abs=1e-12)


def test_t_quantile_tends_to_the_normal_quantile():
    assert student_t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)


@pytest.mark.parametrize(("p", "df"), [(0.0, 4), (1.0, 4), (1.5, 4), (0.9, 0), (0.9, -1), (0.9, math.inf), (True, 4)])
def test_t_quantile_rejects_bad_arguments(p, df):
    with pytest.raises(ValueError, match=r"^(p|df) must be"):
        student_t_quantile(p, df)


# ---- paired comparison: known truths --------------------------------------------------------------------


def test_the_t_interval_is_the_textbook_formula():
    a = [0.9, 0.8, 0.95, 0.85, 0.7]
    b = [0.5, 0.6, 0.55, 0.45, 0.6]
    d = np.subtract(a, b)
    half = 2.7764451 * d.std(ddof=1) / math.sqrt(5)
    result = paired_comparison(a, b)
    assert result.differences == pytest.approx(tuple(d))
    assert result.mean_difference == pytest.approx(d.mean())
    assert (result.low, result.high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-6)
    assert result.n == 5


def test_clear_a_better_and_b_better():
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 0.01, 5)
    better = 0.9 + noise
    worse = 0.5 + noise + rng.normal(0, 0.01, 5)
    result = paired_comparison(better, worse, names=("alibi", "rope"))
    assert result.verdict == "A better" and result.winner == "alibi"
    assert result.low > 0
    flipped = paired_comparison(worse, better, names=("rope", "alibi"))
    assert flipped.verdict == "B better" and flipped.winner == "alibi"
    assert (flipped.low, flipped.high) == pytest.approx((-result.high, -result.low))


def test_pairing_is_what_finds_a_difference_that_seed_noise_hides():
    # Seeds differ a lot from each other, but B is 0.02 lower on every seed: an unpaired look sees
    # overlapping ranges, the paired one sees a consistent difference.
    seeds = np.array([0.3, 0.5, 0.7, 0.9, 0.6])
    a, b = seeds, seeds - np.array([0.02, 0.021, 0.019, 0.02, 0.022])
    assert paired_comparison(a, b).verdict == "A better"
    assert a.min() < b.max()  # the ranges overlap


def test_a_lower_loss_is_better_when_higher_is_not():
    result = paired_comparison([1.0, 1.1, 0.9], [2.0, 2.2, 2.1], higher_is_better=False)
    assert result.verdict == "A better"
    assert paired_comparison([1.0, 1.1, 0.9], [2.0, 2.2, 2.1]).verdict == "B better"


def test_a_difference_inside_the_noise_is_indistinguishable():
    a = [0.57, 0.50, 0.64, 0.55, 0.60]
    b = [0.57, 0.63, 0.48, 0.51, 0.62]
    result = paired_comparison(a, b)
    assert result.verdict == "indistinguishable" and result.winner is None
    assert result.low < 0 < result.high


def test_identical_arms_are_indistinguishable():
    result = paired_comparison([0.5, 0.7, 0.9], [0.5, 0.7, 0.9])
    assert result.verdict == "indistinguishable"
    assert (result.low, result.high) == (0.0, 0.0)


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_swapping_the_arms_flips_the_verdict(method):
    rng = np.random.default_rng(7)
    for _ in range(50):
        a, b = rng.normal(0.5, 0.1, 5), rng.normal(0.55, 0.1, 5)
        forward = paired_comparison(a, b, names=("x", "y"), method=method)
        backward = paired_comparison(b, a, names=("y", "x"), method=method)
        assert forward.winner == backward.winner
        swap = {"A better": "B better", "B better": "A better", "indistinguishable": "indistinguishable"}
        assert backward.verdict == swap[forward.verdict]
        assert forward.mean_difference == pytest.approx(-backward.mean_difference)


def test_t_interval_covers_zero_at_the_nominal_rate_under_the_null():
    # Both arms from one distribution (with a shared per-seed effect, as paired seeds have):
    # a 95 % interval must contain 0 in about 95 % of 4000 experiments of 5 seeds each.
    rng = np.random.default_rng(2026)
    trials = 4000
    covered = 0
    for _ in range(trials):
        shared = rng.normal(0.6, 0.2, 5)
        result = paired_comparison(shared + rng.normal(0, 0.05, 5), shared + rng.normal(0, 0.05, 5))
        covered += result.verdict == "indistinguishable"
    rate = covered / trials
    # binomial standard error at 0.95 over 4000 trials: 0.0034; allow 4 of them
    assert abs(rate - 0.95) < 0.014, rate


def test_t_interval_finds_a_real_difference_most_of_the_time():
    # a shift of 3 standard deviations of the difference, 5 seeds: power well above 80 %
    rng = np.random.default_rng(3)
    found = sum(
        paired_comparison(rng.normal(0.3, 0.1, 5), rng.normal(0, 0.1, 5)).verdict == "A better" for _ in range(500)
    )
    assert found / 500 > 0.8


def test_bootstrap_is_reproducible_and_narrower_than_t_for_five_seeds():
    a = [0.91, 0.85, 0.97, 0.88, 0.80]
    b = [0.70, 0.81, 0.74, 0.90, 0.62]
    one = paired_comparison(a, b, method="bootstrap")
    two = paired_comparison(a, b, method="bootstrap")
    assert (one.low, one.high) == (two.low, two.high)
    t = paired_comparison(a, b)
    assert t.low < one.low and one.high < t.high
    assert one.low <= one.mean_difference <= one.high


def test_bootstrap_interval_lies_within_the_range_of_the_differences():
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0], [0.0, 0.0, 0.0, 0.0, 0.0]
    result = paired_comparison(a, b, method="bootstrap", resamples=2000, seed=5)
    assert 1.0 <= result.low < result.high <= 5.0


def test_summary_names_the_interval_the_seeds_and_the_verdict():
    result = paired_comparison([0.9, 0.95, 0.92, 0.97, 0.93], [0.1, 0.2, 0.15, 0.12, 0.1], names=("alibi", "rope"))
    line = result.summary()
    assert line.startswith("alibi - rope = +0.")
    assert "95% t interval, 5 paired seeds" in line and line.endswith("alibi better")
    assert str(result) == line
    assert " pp" in result.summary(percent=True)
    same = paired_comparison([0.5, 0.6, 0.4], [0.6, 0.5, 0.45], names=("ntk", "yarn"))
    assert same.summary().endswith("indistinguishable")
    assert line.isascii()


def test_the_result_is_frozen_and_its_verdict_one_of_three():
    result = paired_comparison([1.0, 2.0], [0.0, 0.5])
    assert isinstance(result, PairedComparison) and result.verdict in VERDICTS
    with pytest.raises(AttributeError):
        result.low = 0.0


def test_accepts_numpy_and_torch_inputs():
    a, b = [0.9, 0.8, 0.85], [0.5, 0.55, 0.6]
    reference = paired_comparison(a, b)
    for cast in (np.asarray, lambda x: torch.tensor(x, dtype=torch.float64)):
        assert paired_comparison(cast(a), cast(b)) == reference


def test_several_comparisons_at_once_with_and_without_bonferroni():
    arms = {"inside": ([0.9, 0.91, 0.92], [0.5, 0.52, 0.49]), "far": ([0.3, 0.5, 0.4], [0.35, 0.45, 0.42])}
    plain = paired_comparisons(arms, names=("alibi", "rope"))
    assert list(plain) == ["inside", "far"]
    assert plain["inside"].verdict == "A better" and plain["far"].verdict == "indistinguishable"
    assert plain["far"] == paired_comparison(*arms["far"], names=("alibi", "rope"))
    corrected = paired_comparisons(arms, names=("alibi", "rope"), bonferroni=True)
    assert corrected["inside"].confidence == pytest.approx(0.975)
    assert corrected["inside"].high - corrected["inside"].low > plain["inside"].high - plain["inside"].low


def test_bonferroni_confidence_is_the_formula_the_chapters_state():
    assert bonferroni_confidence(119) == pytest.approx(1 - 0.05 / 119, abs=1e-15)
    assert bonferroni_confidence(1) == pytest.approx(0.95)
    assert bonferroni_confidence(4, 0.9) == pytest.approx(0.975)


def test_bonferroni_keeps_a_family_of_null_comparisons_at_its_level():
    # 10 comparisons where the truth is "no difference" (five normal seed differences each): read at
    # 95 % each, some comparison of the family names a winner in ~40 % of families; corrected together,
    # in at most ~5 %
    rng = np.random.default_rng(0)
    families, k = 400, 10
    level = bonferroni_confidence(k)
    plain = corrected = 0
    for _ in range(families):
        deltas = rng.normal(size=(k, 5))
        plain += any(paired_comparison(d, np.zeros(5)).winner for d in deltas)
        corrected += any(paired_comparison(d, np.zeros(5), confidence=level).winner for d in deltas)
    assert plain / families > 0.3
    assert corrected / families < 0.08


def test_a_comparison_read_at_another_confidence_keeps_its_seeds_names_method_and_direction():
    loss = paired_comparison(
        [1.0, 1.1, 0.9, 1.05, 0.98], [1.2, 1.3, 1.1, 1.21, 1.2], names=("a", "b"), higher_is_better=False
    )
    wide = loss.at(bonferroni_confidence(1000))
    assert wide == paired_comparison(
        loss.a, loss.b, names=("a", "b"), confidence=1 - 0.05 / 1000, higher_is_better=False
    )
    assert (wide.names, wide.method, wide.higher_is_better) == (("a", "b"), "t", False)
    assert wide.low < loss.low and wide.high > loss.high and loss.winner == "a"
    boot = paired_comparison(loss.a, loss.b, method="bootstrap").at(0.9)
    assert boot.method == "bootstrap" and boot.confidence == 0.9
    with pytest.raises(ValueError, match="confidence"):
        loss.at(1.5)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "5", None])
def test_bonferroni_confidence_rejects_a_count_that_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="comparisons must be an integer >= 1"):
        bonferroni_confidence(bad)


def test_bonferroni_confidence_rejects_a_bad_family_confidence():
    with pytest.raises(ValueError, match="confidence must be a real number in"):
        bonferroni_confidence(3, 1.5)


# ---- validation -------------------------------------------------------------------------------------------


def test_rejects_unpaired_inputs():
    with pytest.raises(ValueError, match="same seeds"):
        paired_comparison([0.1, 0.2, 0.3], [0.1, 0.2])


@pytest.mark.parametrize(
    ("a", "b", "error", "match"),
    [
        ([0.5], [0.4], ValueError, "at least 2"),
        ([0.5, float("nan")], [0.4, 0.3], ValueError, "finite"),
        ([0.5, 0.6], [0.4, float("inf")], ValueError, "finite"),
        ([0.5, "x"], [0.4, 0.3], TypeError, "real number"),
        ([0.5, True], [0.4, 0.3], TypeError, "real number"),
        (0.5, [0.4, 0.3], TypeError, "1-D sequence"),
        ("ab", [0.4, 0.3], TypeError, "1-D sequence"),
        (np.ones((2, 2)), np.ones((2, 2)), ValueError, "1-D"),
    ],
)
def test_rejects_bad_values(a, b, error, match):
    with pytest.raises(error, match=match):
        paired_comparison(a, b)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"confidence": 1.0}, ValueError, "confidence"),
        ({"confidence": 0}, ValueError, "confidence"),
        ({"confidence": 95}, ValueError, "confidence"),
        ({"method": "z"}, ValueError, "method"),
        ({"names": ("a",)}, TypeError, "names"),
        ({"names": ("a", "a")}, ValueError, "names must differ"),
        ({"higher_is_better": 1}, TypeError, "higher_is_better"),
        ({"method": "bootstrap", "resamples": 10}, ValueError, "resamples"),
        ({"method": "bootstrap", "seed": 1.5}, TypeError, "seed"),
    ],
)
def test_rejects_bad_options(options, error, match):
    with pytest.raises(error, match=match):
        paired_comparison([0.1, 0.2, 0.3], [0.2, 0.2, 0.2], **options)


def test_several_comparisons_reject_what_is_not_a_mapping_of_pairs():
    with pytest.raises(TypeError, match="arms"):
        paired_comparisons([([0.1, 0.2], [0.2, 0.3])])
    with pytest.raises(TypeError, match="pair"):
        paired_comparisons({"x": ([0.1, 0.2],)})
