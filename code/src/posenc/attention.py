r"""Scaled dot-product attention with an optional additive bias and causal mask.

Book: chapter 1 (``book/01_why_position.ipynb``). Paper: Vaswani et al., 2017,
"Attention Is All You Need", arXiv:1706.03762, equation (1). Query and key positions (the
causal mask's alignment) follow :mod:`posenc.positions`.

Shapes:
    b: batch size, h: heads, s_q: query length, s_k: key length, d: head dim,
    d_v: value dim. Queries and keys are ``(b, h, s, d)`` throughout posenc.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._checks import check_bool, check_tensor
from posenc.positions import causal_mask, causal_mask_matrix, resolve_offset

__all__ = ["causal_mask", "check_qkv", "logits_dtype", "masked_softmax", "scaled_dot_product_attention"]


def check_qkv(q: object, k: object, v: object) -> tuple[int, int, int, int, int]:
    """Validate ``(b, h, s_q, d)``, ``(b, h, s_k, d)``, ``(b, h, s_k, d_v)`` inputs; return ``b, h, s_q, s_k, d``.

    Shared by every attention of posenc (plain and Shaw et al.'s): one floating dtype and one
    device for all three, matching batch and head sizes, non-empty lengths and head dim.
    """
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, tensor, ndim=4, floating=True)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
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
    return b, h, s_q, s_k, d


def logits_dtype(q_dtype: torch.dtype, bias_dtype: torch.dtype | None = None) -> torch.dtype:
    """The dtype in which attention is computed: ``promote_types(q, bias, float32)``.

    float64 stays float64; float16/bfloat16 queries, or a float32 bias with them, give float32.
    Half-precision logits would overflow (float16 ends at 65504) or round a bias away (bfloat16
    spacing is 4 near 1000, so ALiBi's neighbouring keys would get the same bias); transformers'
    eager attention takes its softmax in float32 for the same reason.
    """
    dtype = torch.promote_types(q_dtype, torch.float32)
    return dtype if bias_dtype is None else torch.promote_types(dtype, bias_dtype)


def masked_softmax(logits: Tensor, allowed: Tensor | None) -> Tensor:
    """Softmax over the last dim where ``allowed`` is True (``-inf`` elsewhere); an unchecked kernel.

    Shapes:
        logits ``(..., s_q, s_k)``, allowed ``(s_q, s_k)`` bool (broadcast) or None; returns logits' shape.
    """
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.softmax(logits, dim=-1)


def _attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, allowed: Tensor | None) -> tuple[Tensor, Tensor]:
    """Unchecked kernel of :func:`scaled_dot_product_attention`."""
    dtype, d = q.dtype, q.shape[-1]
    work = logits_dtype(dtype, None if bias is None else bias.dtype)
    q, k, v = q.to(work), k.to(work), v.to(work)  # no copy when already in work
    # Scale before the product: (q / sqrt(d)) k^T has no intermediate sqrt(d) times larger than
    # the logits themselves, unlike (q k^T) / sqrt(d).
    logits = (q * d**-0.5) @ k.transpose(-2, -1)  # (b, h, s_q, s_k)
    if bias is not None:
        logits = logits + bias  # (b, h, s_q, s_k)
    weights = masked_softmax(logits, allowed)  # (b, h, s_q, s_k)
    out = weights @ v  # (b, h, s_q, d_v)
    return out.to(dtype), weights.to(dtype)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    bias: Tensor | None = None,
    causal: bool = False,
    offset: int | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Attention that returns both its output and its weights.

    .. math::

        A = \operatorname{softmax}\!\Big(\frac{q}{\sqrt{d}} k^\top + B + M\Big), \qquad
        \text{output} = A\, v

    where ``B`` is the optional additive ``bias`` (T5 or ALiBi position terms live here)
    and ``M`` is ``0`` where attention is allowed and ``-inf`` where the causal mask
    forbids it: query ``i`` sits at position ``offset + i`` and sees keys ``j <= offset + i``
    (:func:`posenc.positions.causal_mask`). The default ``offset=None`` means ``s_k - s_q``:
    the queries are the last ``s_q`` positions, as in a KV-cache decode step. ``offset`` only
    changes the causal mask, so passing it with ``causal=False`` raises.

    Precision: everything is computed in ``promote_types(q.dtype, bias.dtype, float32)``
    (``q``, ``k``, ``v`` are cast to it; nothing is copied for float32 or float64 inputs) and the
    output and weights are returned in ``q``'s dtype. ``q`` is scaled by ``d^{-1/2}`` *before*
    the product, so no intermediate exceeds the logits. So float16 inputs whose ``q k^T``
    overflows 65504 still give finite, float32-accurate logits, and a float32 bias from
    :func:`posenc.alibi_bias` or :class:`posenc.T5RelativeBias` works with bfloat16 or float16
    queries and keeps its precision; casting the bias to bfloat16 instead would round ALiBi's
    ``-m (i - j)`` to steps of 4 near distance 1000. PyTorch's CPU SDPA likewise accepts a
    float32 mask with half-precision queries and gives the accuracy of a float32 mask.

    Shapes:
        q: ``(b, h, s_q, d)``
        k: ``(b, h, s_k, d)``
        v: ``(b, h, s_k, d_v)``
        bias: broadcastable to ``(b, h, s_q, s_k)``, e.g. ``(h, s_q, s_k)``; floating, on q's device
        returns ``output (b, h, s_q, d_v)`` and ``weights (b, h, s_q, s_k)``, both in q's dtype

    A bias row that is ``-inf`` everywhere has no defined softmax and gives NaN, as in
    every attention implementation; the causal mask alone never produces such a row.
    """
    b, h, s_q, s_k, _d = check_qkv(q, k, v)
    causal = check_bool("causal", causal)
    if bias is not None:
        check_tensor("bias", bias, floating=True)
        try:
            shape = torch.broadcast_shapes(bias.shape, (b, h, s_q, s_k))
        except RuntimeError:
            shape = None
        if shape != (b, h, s_q, s_k):
            raise ValueError(f"bias must broadcast to (b, h, s_q, s_k) = {(b, h, s_q, s_k)}, got {tuple(bias.shape)}")
        if bias.device != q.device:
            raise ValueError(f"bias must be on q's device {q.device}, got {bias.device}")
    allowed = None
    if causal:
        allowed = causal_mask_matrix(s_q, s_k, resolve_offset(s_q, s_k, offset), q.device)  # (s_q, s_k)
    elif offset is not None:
        raise ValueError(f"offset only positions the causal mask; got offset={offset!r} with causal=False")
    return _attention(q, k, v, bias, allowed)
