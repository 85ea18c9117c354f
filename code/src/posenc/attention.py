"""Scaled dot-product attention with an optional additive bias and causal mask.

Book: chapter 1 (``book/01_why_position.ipynb``). Paper: Vaswani et al., 2017,
"Attention Is All You Need", arXiv:1706.03762, equation (1).

Shapes:
    b: batch size, h: heads, s_q: query length, s_k: key length, d: head dim,
    d_v: value dim. Queries and keys are ``(b, h, s, d)`` throughout posenc.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from posenc._checks import check_bool, check_int, check_tensor

__all__ = ["causal_mask", "scaled_dot_product_attention"]


def causal_mask(q_len: int, k_len: int, *, device: torch.device | str | None = None) -> Tensor:
    """Boolean mask that lets each query see only keys at or before its own position.

    The queries are the *last* ``q_len`` positions of the ``k_len`` keys (bottom-right
    alignment), as in decoding with a KV cache: query ``i`` sits at absolute position
    ``k_len - q_len + i`` and may attend to key ``j`` iff ``j <= k_len - q_len + i``.
    For ``q_len == k_len`` this is the usual lower-triangular mask.

    Shapes:
        returns ``(s_q, s_k)``, ``True`` where attention is allowed.
    """
    q_len = check_int("q_len", q_len, minimum=1)
    k_len = check_int("k_len", k_len, minimum=1)
    if q_len > k_len:
        raise ValueError(
            f"causal attention needs q_len <= k_len (queries are the last q_len positions), "
            f"got q_len={q_len}, k_len={k_len}"
        )
    # diagonal=k_len-q_len shifts the triangle so that the last query sees every key.
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
) -> tuple[Tensor, Tensor]:
    r"""Attention that returns both its output and its weights.

    .. math::

        A = \operatorname{softmax}\!\Big(\frac{q k^\top}{\sqrt{d}} + B + M\Big), \qquad
        \text{output} = A\, v

    where ``B`` is the optional additive ``bias`` (T5 or ALiBi position terms live here)
    and ``M`` is ``0`` where attention is allowed and ``-inf`` where the causal mask
    forbids it (see :func:`causal_mask` for its bottom-right alignment).

    Shapes:
        q: ``(b, h, s_q, d)``
        k: ``(b, h, s_k, d)``
        v: ``(b, h, s_k, d_v)``
        bias: broadcastable to ``(b, h, s_q, s_k)``, e.g. ``(h, s_q, s_k)``
        returns ``output (b, h, s_q, d_v)`` and ``weights (b, h, s_q, s_k)``

    A bias row that is ``-inf`` everywhere has no defined softmax and gives NaN, as in
    every attention implementation; the causal mask alone never produces such a row.
    """
    check_tensor("q", q, ndim=4, floating=True)
    check_tensor("k", k, ndim=4, floating=True)
    check_tensor("v", v, ndim=4, floating=True)
    causal = check_bool("causal", causal)
    b, h, s_q, d = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h):
        raise ValueError(
            f"q, k and v must share batch and head sizes, got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[-1] != d:
        raise ValueError(f"q and k must share head_dim, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    s_k = k.shape[2]
    if v.shape[2] != s_k:
        raise ValueError(f"k and v must have the same length, got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if d == 0 or s_q == 0 or s_k == 0:
        raise ValueError(f"q and k must have non-empty length and head_dim, got q {tuple(q.shape)}, k {tuple(k.shape)}")

    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)  # (b, h, s_q, s_k)
    if bias is not None:
        check_tensor("bias", bias, floating=True)
        try:
            shape = torch.broadcast_shapes(bias.shape, scores.shape)
        except RuntimeError:
            shape = None
        if shape != scores.shape:
            raise ValueError(
                f"bias must broadcast to (b, h, s_q, s_k) = {tuple(scores.shape)}, got {tuple(bias.shape)}"
            )
        scores = scores + bias
    if causal:
        allowed = causal_mask(s_q, s_k, device=scores.device)  # (s_q, s_k)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (b, h, s_q, s_k)
    return weights @ v, weights  # (b, h, s_q, d_v), (b, h, s_q, s_k)
