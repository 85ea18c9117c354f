r"""ALiBi: attention with linear biases (Press et al., 2022, arXiv:2108.12409).

Book: chapter 6 (``book/06_beyond.ipynb``). No position vectors at all: each head ``h`` adds
``-m_h * distance`` to the attention logits, with a fixed (not learned) slope ``m_h``:

.. math::

    \text{logit}_{ij} = \frac{q_i^\top k_j}{\sqrt{d}} - m_h\, |j - i|

For ``n`` heads, a power of two, the slopes are the geometric sequence that starts at
:math:`2^{-8/n}` with that same ratio: :math:`m_h = 2^{-8h/n}`, ``h = 1..n``. For other head
counts the paper takes the slopes of the closest power of two below ``n`` and adds every other
slope of the sequence for twice that number.

Shapes:
    h: heads, s_q: query length, s_k: key length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._checks import check_int
from posenc.relative import relative_positions

__all__ = ["alibi_bias", "alibi_slopes"]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)  # 2^(-8/n), then the same ratio: m_h = start^h
    return [start**h for h in range(1, n + 1)]


def alibi_slopes(num_heads: int) -> Tensor:
    """The fixed per-head slopes ``m_h`` of ALiBi, in the paper's order (the power-of-two part first).

    Shapes:
        returns ``(h,)``, float32.
    """
    num_heads = check_int("num_heads", num_heads, minimum=1)
    closest = 2 ** math.floor(math.log2(num_heads))  # largest power of two <= num_heads
    slopes = _power_of_two_slopes(closest)
    if closest != num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(num_heads: int, q_len: int, k_len: int, *, offset: int = 0) -> Tensor:
    """ALiBi's additive bias ``-m_h * |j - i|`` for queries at ``offset + i`` and keys at ``j``.

    In a causal decoder only keys ``j <= i`` are seen, where this is the paper's ``-m_h (i - j)``.
    Within one query's row it differs from BLOOM's ``m_h * j`` by a constant, which softmax ignores.

    Shapes:
        returns ``(h, s_q, s_k)``, float32.
    """
    distance = relative_positions(q_len, k_len, offset=offset).abs().float()  # (s_q, s_k)
    return -alibi_slopes(num_heads)[:, None, None] * distance  # (h, s_q, s_k)
