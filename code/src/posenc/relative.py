r"""Relative position: the relative-position matrix, T5's bucketed bias, Shaw et al.'s attention.

Book: chapter 4 (``book/04_relative.ipynb``).

Sign convention (T5's, used everywhere in posenc): the relative position of key ``j`` seen from
query ``i`` is ``j - i``, key position minus query position. Negative values point to earlier
tokens. Query ``i`` sits at absolute position ``offset + i``, so that decoding with a KV cache
(one new query after ``offset`` cached keys) uses the same functions.

Shapes:
    b: batch, h: heads, s_q: query length, s_k: key length, d: head dim, r = 2k + 1: number of
    clipped distances in Shaw et al.'s tables.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posenc._checks import check_bool, check_int, check_integer_tensor, check_tensor

__all__ = [
    "T5RelativeBias",
    "relative_positions",
    "shaw_attention",
    "shaw_attention_naive",
    "shaw_relative_indices",
    "t5_relative_bucket",
]


def relative_positions(q_len: int, k_len: int, *, offset: int = 0) -> Tensor:
    """The matrix of relative positions ``j - (offset + i)``: key position minus query position.

    Shapes:
        returns ``(s_q, s_k)``, int64.
    """
    q_len = check_int("q_len", q_len, minimum=1)
    k_len = check_int("k_len", k_len, minimum=1)
    offset = check_int("offset", offset)
    queries = torch.arange(q_len)[:, None] + offset  # (s_q, 1): absolute query positions
    keys = torch.arange(k_len)[None, :]  # (1, s_k)
    return keys - queries  # (s_q, s_k)


def _check_bucket_settings(bidirectional: object, num_buckets: object, max_distance: object) -> tuple[bool, int, int]:
    """Validate T5 bucket settings; return them with the size of the exact zone per direction."""
    bidirectional = check_bool("bidirectional", bidirectional)
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    max_distance = check_int("max_distance", max_distance, minimum=1)
    if bidirectional:
        if num_buckets % 2:
            raise ValueError(
                f"num_buckets must be even when bidirectional (half the buckets per direction), got {num_buckets}"
            )
        if num_buckets < 4:
            raise ValueError(f"num_buckets must be >= 4 when bidirectional (an exact zone per direction), got {num_buckets}")
        per_direction = num_buckets // 2
    else:
        if num_buckets < 2:
            raise ValueError(f"num_buckets must be >= 2 when not bidirectional, got {num_buckets}")
        per_direction = num_buckets
    max_exact = per_direction // 2
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be larger than the exact zone ({max_exact} distances for num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}), got {max_distance}"
        )
    return bidirectional, num_buckets, max_distance


def t5_relative_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    r"""T5's bucket index for each relative position (Raffel et al., 2020, arXiv:1910.10683).

    With ``bidirectional`` the buckets are split in half: keys after the query (``j - i > 0``)
    use the upper half. Otherwise only keys at or before the query count (later ones fall in
    bucket 0). Within a direction with ``B`` buckets and distance :math:`r = |j - i|`:

    .. math::

        \text{bucket}(r) =
        \begin{cases}
            r & r < B/2 \quad\text{(exact zone)} \\
            \min\!\Big(B - 1,\ B/2 + \Big\lfloor \frac{\ln(r / (B/2))}{\ln(\text{max\_distance} / (B/2))}
                \,(B - B/2) \Big\rfloor\Big) & \text{otherwise (logarithmic zone)}
        \end{cases}

    so every distance of at least about ``max_distance`` shares the last bucket. The arithmetic is
    that of Hugging Face transformers' ``T5Attention._relative_position_bucket`` (float32 log,
    truncation), so the buckets are identical to it for every integer input.

    Shapes:
        relative_position: any shape, integer; returns the same shape, int64, in ``[0, num_buckets)``.
    """
    check_integer_tensor("relative_position", relative_position)
    bidirectional, num_buckets, max_distance = _check_bucket_settings(bidirectional, num_buckets, max_distance)
    rel = relative_position.long()

    if bidirectional:
        per_direction = num_buckets // 2
        base = (rel > 0).long() * per_direction  # keys after the query use the upper half
        distance = rel.abs()
    else:
        per_direction = num_buckets
        base = torch.zeros_like(rel)
        distance = (-rel).clamp(min=0)  # later keys (rel > 0) count as distance 0
    max_exact = per_direction // 2

    # Logarithmic zone. Clamping below at max_exact keeps log() finite where the exact zone is used.
    scaled = torch.log(distance.clamp(min=max_exact).float() / max_exact) / math.log(max_distance / max_exact)
    log_bucket = (max_exact + (scaled * (per_direction - max_exact)).long()).clamp(max=per_direction - 1)
    return base + torch.where(distance < max_exact, distance, log_bucket)


class T5RelativeBias(nn.Module):
    """T5's relative attention bias: one learned scalar per (bucket, head), added to the logits.

    T5 computes it once, in the first layer, and shares it with every layer. ``forward`` builds
    the ``(h, s_q, s_k)`` bias from the ``s_q + s_k - 1`` distinct relative positions only: the
    bias depends on ``j - i`` alone, so the matrix is Toeplitz and each diagonal is one value.

    Shapes:
        forward(q_len, k_len, offset) returns ``(h, s_q, s_k)``; ``weight`` is ``(num_buckets, h)``.
    """

    def __init__(
        self,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        self.bidirectional, self.num_buckets, self.max_distance = _check_bucket_settings(
            bidirectional, num_buckets, max_distance
        )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        self.weight = nn.Parameter(torch.randn(self.num_buckets, self.num_heads, generator=generator))  # (buckets, h)

    def forward(self, q_len: int, k_len: int, *, offset: int = 0) -> Tensor:
        q_len = check_int("q_len", q_len, minimum=1)
        k_len = check_int("k_len", k_len, minimum=1)
        offset = check_int("offset", offset)
        # Every relative position that occurs, from the bottom-left corner (first key, last
        # query) to the top-right one (last key, first query): s_q + s_k - 1 values.
        rel = torch.arange(-(offset + q_len - 1), k_len - offset, device=self.weight.device)  # (s_q + s_k - 1,)
        buckets = t5_relative_bucket(
            rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )
        values = self.weight[buckets].T  # (h, s_q + s_k - 1): the value on each diagonal
        # Row i is the window of k_len values that starts at relative position -(offset + i):
        # windows taken left to right are rows bottom to top, so flip them.
        return values.unfold(-1, k_len, 1).flip(-2)  # (h, s_q, s_k)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )


def shaw_relative_indices(q_len: int, k_len: int, max_relative: int, *, offset: int = 0) -> Tensor:
    """Row index into Shaw et al.'s tables for each (query, key) pair: ``clip(j - i, -k, k) + k``.

    Shapes:
        returns ``(s_q, s_k)``, int64, in ``[0, 2k]``.
    """
    max_relative = check_int("max_relative", max_relative, minimum=1)
    return relative_positions(q_len, k_len, offset=offset).clamp(-max_relative, max_relative) + max_relative


def _check_shaw(q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, causal: object, offset: object) -> int:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, tensor, ndim=4, floating=True)
    check_tensor("rel_k", rel_k, ndim=2, floating=True)
    check_tensor("rel_v", rel_v, ndim=2, floating=True)
    check_bool("causal", causal)
    check_int("offset", offset)
    b, h, s_q, d = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h) or k.shape[-1] != d or v.shape[2] != k.shape[2]:
        raise ValueError(
            f"q, k, v must be (b, h, s_q, d), (b, h, s_k, d), (b, h, s_k, d_v); "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if 0 in (s_q, k.shape[2], d):
        raise ValueError(f"q and k must have non-empty length and head_dim, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    r = rel_k.shape[0]
    if r < 3 or r % 2 == 0:
        raise ValueError(f"rel_k must have 2k + 1 rows with k >= 1 (distances -k..k), got {r} rows")
    if rel_k.shape[1] != d:
        raise ValueError(f"rel_k must be (2k + 1, d) with d = {d}, got {tuple(rel_k.shape)}")
    if rel_v.shape != (r, v.shape[-1]):
        raise ValueError(f"rel_v must be (2k + 1, d_v) = {(r, v.shape[-1])}, got {tuple(rel_v.shape)}")
    return (r - 1) // 2


def _softmax_with_mask(scores: Tensor, causal: bool, offset: int) -> Tensor:
    if causal:
        s_q, s_k = scores.shape[-2:]
        allowed = relative_positions(s_q, s_k, offset=offset).to(scores.device) <= 0  # key at or before query
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


def shaw_attention_naive(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, *, causal: bool = False, offset: int = 0
) -> tuple[Tensor, Tensor]:
    r"""Shaw et al.'s relative attention, computed as written (arXiv:1803.02155, eqs. 3-4).

    .. math::

        e_{ij} = \frac{q_i \cdot (k_j + a^K_{ij})}{\sqrt{d}}, \qquad
        z_i = \sum_j \operatorname{softmax}_j(e_{ij})\,(v_j + a^V_{ij}), \qquad
        a^{K,V}_{ij} = w^{K,V}_{\operatorname{clip}(j - i,\,-k,\,k)}

    The tables ``rel_k`` and ``rel_v`` (``w^K``, ``w^V``) hold 2k + 1 vectors shared by all heads.
    This version materialises ``a^K`` and ``a^V`` as ``(s_q, s_k, d)`` tensors: its memory grows
    as ``s_q * s_k * d``. :func:`shaw_attention` gives the same result without them.

    Shapes:
        q ``(b, h, s_q, d)``, k ``(b, h, s_k, d)``, v ``(b, h, s_k, d_v)``, rel_k ``(2k+1, d)``,
        rel_v ``(2k+1, d_v)``; returns output ``(b, h, s_q, d_v)`` and weights ``(b, h, s_q, s_k)``.
    """
    max_relative = _check_shaw(q, k, v, rel_k, rel_v, causal, offset)
    index = shaw_relative_indices(q.shape[2], k.shape[2], max_relative, offset=offset).to(q.device)  # (s_q, s_k)
    a_k, a_v = rel_k[index], rel_v[index]  # (s_q, s_k, d), (s_q, s_k, d_v)
    scores = q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)  # (b, h, s_q, s_k)
    weights = _softmax_with_mask(scores / math.sqrt(q.shape[-1]), causal, offset)
    out = weights @ v + torch.einsum("bhij,ijd->bhid", weights, a_v)  # (b, h, s_q, d_v)
    return out, weights


def shaw_attention(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, *, causal: bool = False, offset: int = 0
) -> tuple[Tensor, Tensor]:
    r"""Shaw et al.'s relative attention without materialising any ``(s_q, s_k, d)`` tensor.

    Two rearrangements (the idea behind Music Transformer's "skewing", arXiv:1809.04281):

    * keys: :math:`q_i \cdot a^K_{ij} = (q_i \cdot w^K_r)` with ``r = clip(j - i) + k``, so compute
      the ``(s_q, 2k+1)`` products ``q @ rel_k.T`` once and gather them into place;
    * values: :math:`\sum_j \alpha_{ij} a^V_{ij} = \sum_r \big(\sum_{j: r(i,j) = r} \alpha_{ij}\big) w^V_r`,
      so add the weights up per distance (scatter-add to ``(s_q, 2k+1)``) and multiply by ``rel_v``.

    Besides the attention matrix itself, the extra memory is ``O(s_q (2k+1))`` per head plus one
    shared ``(s_q, s_k)`` index: nothing grows with ``s_q * s_k * d``. Equal to
    :func:`shaw_attention_naive` up to rounding.

    Shapes:
        as :func:`shaw_attention_naive`.
    """
    max_relative = _check_shaw(q, k, v, rel_k, rel_v, causal, offset)
    b, h, s_q, d = q.shape
    s_k = k.shape[2]
    index = shaw_relative_indices(s_q, s_k, max_relative, offset=offset).to(q.device)  # (s_q, s_k)
    index = index.expand(b, h, s_q, s_k)  # a view: no copy
    q_rel = q @ rel_k.T  # (b, h, s_q, 2k+1): q_i . w^K_r for every clipped distance r
    scores = q @ k.transpose(-2, -1) + q_rel.gather(-1, index)  # (b, h, s_q, s_k)
    weights = _softmax_with_mask(scores / math.sqrt(d), causal, offset)
    weight_per_distance = torch.zeros_like(q_rel).scatter_add_(-1, index, weights)  # (b, h, s_q, 2k+1)
    out = weights @ v + weight_per_distance @ rel_v  # (b, h, s_q, d_v)
    return out, weights
