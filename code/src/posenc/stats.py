"""Paired-seed comparisons: is arm A better than arm B, or can the seeds not tell them apart?

Book: the lab (``book/09_lab.ipynb``) and the context-extension chapter (``book/10_extension.ipynb``).
Two arms (two position schemes, two scaling methods) are trained on the **same** seeds: seed ``i``
fixes both the initial weights and the stream of training batches of each arm, so the difference
``delta_i = a_i - b_i`` removes what the two runs of seed ``i`` share. The comparison is about the
mean difference ``mean(delta)`` over the ``n`` seeds:

* **Student-t interval** (``method="t"``, the default): ``mean(delta) +- t_{(1 + c) / 2, n - 1}
  s / sqrt(n)``, with ``s`` the sample standard deviation of the differences (``n - 1`` in its
  denominator) and ``c`` the confidence. It assumes the seed-to-seed differences are roughly normal;
  with 5 seeds, ``t_{0.975, 4} = 2.776``.
* **Paired bootstrap** (``method="bootstrap"``): resample the ``n`` differences with replacement
  (the pairs stay together), ``resamples`` times, from a fixed generator (``seed``); the interval is
  the ``(1 - c) / 2`` and ``(1 + c) / 2`` percentiles of the resampled means. No normality, but with
  5 seeds it is narrower than the t interval (it cannot see tails that 5 seeds did not show).

The **verdict** is ``"A better"`` or ``"B better"`` only when the interval excludes zero, else
``"indistinguishable"``: "no difference shown", never "equal". ``higher_is_better=False`` is for a
loss. Each interval holds its own confidence; for many comparisons at once,
:func:`bonferroni_confidence` gives the confidence that widens each one so that the whole family
keeps it (Bonferroni), and :func:`paired_comparisons` can apply it to a table.

The t quantile is computed here (SciPy is not a dependency): the t distribution's CDF from the
regularised incomplete beta function (a continued fraction), inverted by bisection.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = [
    "VERDICTS",
    "PairedComparison",
    "bonferroni_confidence",
    "paired_comparison",
    "paired_comparisons",
    "student_t_cdf",
    "student_t_quantile",
]

VERDICTS = ("A better", "B better", "indistinguishable")
METHODS = ("t", "bootstrap")


# ---- The t distribution without SciPy ----------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), for x < (a+1)/(a+b+2)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        # even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m))
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        # odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _regularised_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b) = B(x; a, b) / B(a, b)`` for ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b  # the symmetry I_x(a,b) = 1 - I_{1-x}(b,a)


def _check_df(df: object) -> float:
    if isinstance(df, bool) or not isinstance(df, numbers.Real) or not math.isfinite(df) or df <= 0:
        raise ValueError(f"df must be a finite real number > 0, got {df!r}")
    return float(df)


def student_t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom.

    ``P(T <= t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2`` for ``t >= 0``, and the symmetry
    ``P(T <= -t) = 1 - P(T <= t)``.
    """
    df = _check_df(df)
    if isinstance(t, bool) or not isinstance(t, numbers.Real) or math.isnan(t):
        raise ValueError(f"t must be a real number, got {t!r}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _regularised_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom: ``t`` with ``P(T <= t) = p``.

    Bisection on :func:`student_t_cdf` to a relative width of ``1e-13``; e.g. ``t_{0.975, 4} = 2.7764``,
    ``t_{0.975, 9} = 2.2622``.
    """
    df = _check_df(df)
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 < p < 1.0:
        raise ValueError(f"p must be a probability in (0, 1), got {p!r}")
    if p == 0.5:
        return 0.0
    upper = p > 0.5
    target = p if upper else 1.0 - p  # solve for the positive quantile, then mirror
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < target:
        low, high = high, 2.0 * high
    while high - low > 1e-13 * high:
        middle = 0.5 * (low + high)
        if student_t_cdf(middle, df) < target:
            low = middle
        else:
            high = middle
    t = 0.5 * (low + high)
    return t if upper else -t


# ---- Paired comparison -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """The result of :func:`paired_comparison`: per-seed differences, their mean, an interval, a verdict.

    ``differences[i] = a[i] - b[i]`` (seed ``i`` of both arms); ``low`` and ``high`` bound the mean
    difference at ``confidence`` by ``method``. ``verdict`` is one of :data:`VERDICTS`.
    """

    names: tuple[str, str]
    a: tuple[float, ...]
    b: tuple[float, ...]
    differences: tuple[float, ...]
    mean_difference: float
    low: float
    high: float
    confidence: float
    method: str
    higher_is_better: bool

    @property
    def n(self) -> int:
        """The number of paired seeds."""
        return len(self.differences)

    @property
    def verdict(self) -> str:
        """``"A better"`` / ``"B better"`` when the interval excludes 0, else ``"indistinguishable"``."""
        if self.low > 0:
            return "A better" if self.higher_is_better else "B better"
        if self.high < 0:
            return "B better" if self.higher_is_better else "A better"
        return "indistinguishable"

    @property
    def winner(self) -> str | None:
        """The name of the better arm, or None when the seeds cannot tell them apart."""
        return {"A better": self.names[0], "B better": self.names[1]}.get(self.verdict)

    def summary(self, *, percent: bool = False) -> str:
        """One line for a book, in English and ASCII, e.g.
        ``alibi - rope = +0.412 [95% t interval, 5 paired seeds: +0.301, +0.523]: alibi better``.

        ``percent=True`` writes the values in percentage points (``+41.2 pp``).
        """

        def value(x: float) -> str:
            return f"{100 * x:+.1f} pp" if percent else f"{x:+.3f}"

        method = "t interval" if self.method == "t" else "paired bootstrap"
        level = f"{100 * self.confidence:g}%"
        a, b = self.names
        outcome = f"{self.winner} better" if self.winner else "indistinguishable"
        return (
            f"{a} - {b} = {value(self.mean_difference)} "
            f"[{level} {method}, {self.n} paired seeds: {value(self.low)}, {value(self.high)}]: {outcome}"
        )

    def __str__(self) -> str:
        return self.summary()

    def at(self, confidence: float) -> PairedComparison:
        """The same comparison (seeds, names, method, direction) at another ``confidence``, e.g. at
        :func:`bonferroni_confidence` to read it corrected within a family. A bootstrap is redrawn with
        :func:`paired_comparison`'s default ``resamples`` and ``seed``."""
        return paired_comparison(
            self.a,
            self.b,
            names=self.names,
            confidence=confidence,
            method=self.method,
            higher_is_better=self.higher_is_better,
        )


def _as_values(name: str, values: object) -> tuple[float, ...]:
    """A 1-D sequence of finite real numbers (list, tuple, NumPy or torch 1-D) as a tuple of floats."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a 1-D sequence of numbers (one per seed), got {type(values).__name__}")
    shape = getattr(values, "shape", None)
    if shape is not None and len(shape) != 1:
        raise ValueError(f"{name} must be 1-D (one value per seed), got shape {tuple(shape)}")
    out = []
    for i, x in enumerate(values.tolist() if hasattr(values, "tolist") else values):
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise TypeError(f"{name}[{i}] must be a real number, got {x!r} ({type(x).__name__})")
        if not math.isfinite(x):
            raise ValueError(f"{name}[{i}] must be finite, got {x!r} (a seed without a measurement cannot be paired)")
        out.append(float(x))
    return tuple(out)


def _check_names(names: object) -> tuple[str, str]:
    if not isinstance(names, (tuple, list)) or len(names) != 2 or not all(isinstance(x, str) and x for x in names):
        raise TypeError(f"names must be two non-empty strings (arm A, arm B), got {names!r}")
    if names[0] == names[1]:
        raise ValueError(f"names must differ (the verdict names the better arm), got {tuple(names)!r}")
    return (names[0], names[1])


def _check_confidence(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be a real number in (0, 1), got {confidence!r}")
    return float(confidence)


def bonferroni_confidence(comparisons: int, confidence: float = 0.95) -> float:
    """The confidence each of ``comparisons`` intervals needs so that all of them hold together with at
    least ``confidence`` (Bonferroni): ``1 - (1 - confidence) / comparisons``. With 119 comparisons at
    95 %, each interval is at 1 - 0.05/119, about 99.96 %. Pass it as :func:`paired_comparison`'s
    ``confidence``."""
    if isinstance(comparisons, bool) or not isinstance(comparisons, numbers.Integral) or comparisons < 1:
        raise ValueError(f"comparisons must be an integer >= 1, got {comparisons!r}")
    return 1.0 - (1.0 - _check_confidence(confidence)) / int(comparisons)


def paired_comparison(
    a: object,
    b: object,
    *,
    names: tuple[str, str] = ("A", "B"),
    confidence: float = 0.95,
    method: str = "t",
    higher_is_better: bool = True,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedComparison:
    """Compare two arms measured on the same seeds: ``a[i]`` and ``b[i]`` come from seed ``i``.

    Returns a :class:`PairedComparison` with the differences ``a[i] - b[i]``, their mean and its
    ``confidence`` interval: Student's t over the seeds (``method="t"``) or a paired percentile
    bootstrap (``method="bootstrap"``, ``resamples`` draws from ``numpy.random.default_rng(seed)``).
    The verdict names a better arm only when the interval excludes zero. At least 2 seeds (the book
    uses 5); every value finite. See the module docstring for the formulas.
    """
    names = _check_names(names)
    a_values, b_values = _as_values("a", a), _as_values("b", b)
    if len(a_values) != len(b_values):
        raise ValueError(
            f"a and b must hold one value per seed for the same seeds, got {len(a_values)} and {len(b_values)} values"
        )
    n = len(a_values)
    if n < 2:
        raise ValueError(f"a and b need at least 2 paired seeds for an interval, got {n}")
    confidence = _check_confidence(confidence)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(higher_is_better, bool):
        raise TypeError(f"higher_is_better must be a bool, got {higher_is_better!r}")
    differences = tuple(x - y for x, y in zip(a_values, b_values, strict=True))
    mean = math.fsum(differences) / n
    if method == "t":
        sd = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1))
        half = student_t_quantile((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    else:
        if isinstance(resamples, bool) or not isinstance(resamples, numbers.Integral) or resamples < 100:
            raise ValueError(f"resamples must be an integer >= 100, got {resamples!r}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an integer, got {seed!r} ({type(seed).__name__})")
        rng = np.random.default_rng(int(seed))
        picks = rng.integers(0, n, size=(int(resamples), n))  # (resamples, n) seeds drawn with replacement
        means = np.asarray(differences)[picks].mean(axis=1)  # (resamples,)
        low, high = (float(x) for x in np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2]))
    return PairedComparison(
        names=names,
        a=a_values,
        b=b_values,
        differences=differences,
        mean_difference=mean,
        low=low,
        high=high,
        confidence=confidence,
        method=method,
        higher_is_better=higher_is_better,
    )


def paired_comparisons(
    arms: Mapping[object, tuple[object, object]],
    *,
    names: tuple[str, str] = ("A", "B"),
    confidence: float = 0.95,
    method: str = "t",
    bonferroni: bool = False,
    **options: object,
) -> dict[object, PairedComparison]:
    """Several paired comparisons at once, e.g. one per band of positions: ``{label: (a, b)}``.

    Returns ``{label: paired_comparison(a, b, ...)}`` in the order given. ``bonferroni=True`` uses
    the confidence ``1 - (1 - confidence) / k`` for each of the ``k`` comparisons, so that all ``k``
    intervals hold together with at least ``confidence``. ``options`` go to :func:`paired_comparison`.
    """
    if not isinstance(arms, Mapping) or not arms:
        raise TypeError(f"arms must be a non-empty mapping {{label: (a, b)}}, got {type(arms).__name__}")
    confidence = _check_confidence(confidence)
    if not isinstance(bonferroni, bool):
        raise TypeError(f"bonferroni must be a bool, got {bonferroni!r}")
    each = bonferroni_confidence(len(arms), confidence) if bonferroni else confidence
    result = {}
    for label, pair in arms.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"arms[{label!r}] must be a pair (a, b), got {type(pair).__name__}")
        result[label] = paired_comparison(pair[0], pair[1], names=names, confidence=each, method=method, **options)
    return result
