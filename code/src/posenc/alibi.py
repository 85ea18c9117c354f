r"""ALiBi: attention with linear biases (Press et al., 2022, arXiv:2108.12409).

Book: the chapter beyond RoPE (``book/07_beyond.ipynb``). No position vectors at all: each head
``h`` adds ``-mu_h * distance`` to the attention logits, with a fixed (not learned) slope
:math:`\mu_h` (the paper's :math:`m`; the book keeps m for the query position):

.. math::

    e_{mn} = \frac{q_m^\top k_n}{\sqrt{d}} - \mu_h\, |n - m|, \qquad m = \text{offset} + i,\ n = j

Query row ``i`` sits at position m = ``offset + i`` and key column ``j`` at n = ``j``
(:mod:`posenc.positions`; ``offset=None`` means ``s_k - s_q``: the queries are the last positions,
as in a decode step).

For ``H`` heads, a power of two, the slopes are the geometric sequence that starts at
:math:`2^{-8/H}` with that same ratio: :math:`\mu_h = 2^{-8h/H}`, ``h = 1..H``. For other head
counts the paper takes the slopes of the closest power of two below ``H`` and adds every other
slope of the sequence for twice that number.

Shapes:
    h: heads, s_q: query length, s_k: key length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._checks import check_int, exact_integer_limit, float_dtype
from posenc.positions import relative_position_matrix, resolve_offset

__all__ = ["alibi_bias", "alibi_slopes"]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)  # 2^(-8/H), then the same ratio: mu_h = start^h
    return [start**h for h in range(1, n + 1)]


def _slopes(num_heads: int) -> list[float]:
    """Unchecked kernel of :func:`alibi_slopes`, in Python floats (float64)."""
    closest = 2 ** math.floor(math.log2(num_heads))  # largest power of two <= num_heads
    slopes = _power_of_two_slopes(closest)
    if closest != num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return slopes


MAX_HEADS = 2**16  # far beyond any model; a larger count is a mistake, not a head count


def _check_heads(num_heads: object) -> int:
    num_heads = check_int("num_heads", num_heads, minimum=1)
    if num_heads > MAX_HEADS:
        raise ValueError(f"num_heads must be <= {MAX_HEADS}, got {num_heads}")
    return num_heads


def alibi_slopes(num_heads: int) -> Tensor:
    """The fixed per-head slopes ``mu_h`` of ALiBi, in the paper's order (the power-of-two part first).

    Shapes:
        returns ``(h,)``, float32.
    """
    num_heads = _check_heads(num_heads)
    return torch.tensor(_slopes(num_heads), dtype=torch.float32)


def alibi_bias(
    num_heads: int,
    q_len: int,
    k_len: int,
    *,
    offset: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""ALiBi's additive bias ``-mu_h * |n - m|`` for queries at m = ``offset + i``, keys at n = ``j``.

    .. math::

        B_{h,mn} = -\mu_h\, |n - m|

    In a causal decoder only keys ``n <= m`` are seen, where this is the paper's ``-m (i - j)``
    (arXiv:2108.12409, section 3; the book's chapter beyond RoPE). Within one query's row it
    differs from BLOOM's ``mu_h * n`` by a constant, which softmax ignores. ``offset=None`` means
    ``k_len - q_len`` (:mod:`posenc.positions`), so ``alibi_bias(h, 1, n)`` is the last row of
    ``alibi_bias(h, n, n)``: the bias of a KV-cache decode step.

    The product is computed in float32 (float64 if ``dtype`` is float64) and rounded once to
    ``dtype``. :func:`posenc.scaled_dot_product_attention` accepts a float32 bias with
    half-precision queries, which keeps the bias exact to float32.

    Shapes:
        returns ``(h, s_q, s_k)``, in ``dtype`` on ``device``.
    """
    num_heads = _check_heads(num_heads)
    offset = resolve_offset(q_len, k_len, offset)
    dtype = float_dtype("dtype", dtype)
    work = torch.promote_types(dtype, torch.float32)
    exact = exact_integer_limit(work)  # every integer distance below this is exact in `work`
    if max(offset + int(q_len), int(k_len)) > exact:
        raise ValueError(
            f"positions up to {max(offset + int(q_len), int(k_len)) - 1} are not exact in {work} distances "
            f"(limit 2**{exact.bit_length() - 1}): two keys would get the same bias; pass dtype=torch.float64"
        )
    slopes = torch.tensor(_slopes(num_heads), dtype=work, device=device)  # (h,)
    distance = relative_position_matrix(int(q_len), int(k_len), offset, device).abs().to(work)  # (s_q, s_k)
    return (-slopes[:, None, None] * distance).to(dtype)  # (h, s_q, s_k)
