r"""Relative position: T5's bucketed bias and Shaw et al.'s attention.

Book: the chapter on relative position (``book/04_relative.ipynb``); notation as in the book's
table: query position m, key position n, relative position r = n - m, Shaw's clip distance c.

Positions follow :mod:`posenc.positions`: query row ``i`` sits at m = ``offset + i``, key column ``j``
at n = ``j``, the relative position is r = n - m (key minus query, T5's sign), and ``offset=None`` means
``s_k - s_q`` (the queries are the last ``s_q`` positions, as in a KV-cache decode step).
:func:`relative_positions` lives there and is re-exported here.

Shapes:
    b: batch, h: heads, s_q: query length, s_k: key length, d: head dim, 2c + 1: number of
    clipped distances in Shaw et al.'s tables (c = ``max_relative``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posenc._checks import check_bool, check_int, check_integer_tensor, check_tensor
from posenc.attention import check_qkv, logits_dtype, masked_softmax
from posenc.positions import causal_mask_matrix, relative_position_matrix, relative_positions, resolve_offset

__all__ = [
    "T5RelativeBias",
    "relative_positions",
    "shaw_attention",
    "shaw_attention_naive",
    "shaw_relative_indices",
    "t5_exact_zone",
    "t5_relative_bucket",
]


def t5_exact_zone(num_buckets: int, *, bidirectional: bool = True) -> int:
    """How many distances per direction T5 gives a bucket of their own: ``0 .. N/2 - 1``, ``N/2`` of them.

    ``N`` is the number of buckets per direction (``num_buckets // 2`` when ``bidirectional``, else
    ``num_buckets``). :func:`t5_relative_bucket` needs ``max_distance`` larger than this zone (the
    logarithmic zone starts where it ends), so this is the smallest ``max_distance`` it refuses.
    """
    bidirectional = check_bool("bidirectional", bidirectional)
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    if bidirectional:
        if num_buckets % 2:
            raise ValueError(
                f"num_buckets must be even when bidirectional (half the buckets per direction), got {num_buckets}"
            )
        if num_buckets < 4:
            raise ValueError(
                f"num_buckets must be >= 4 when bidirectional (an exact zone per direction), got {num_buckets}"
            )
        return num_buckets // 4
    if num_buckets < 2:
        raise ValueError(f"num_buckets must be >= 2 when not bidirectional, got {num_buckets}")
    return num_buckets // 2


def _check_bucket_settings(bidirectional: object, num_buckets: object, max_distance: object) -> tuple[bool, int, int]:
    """Validate T5 bucket settings; return them."""
    max_exact = t5_exact_zone(num_buckets, bidirectional=bidirectional)
    max_distance = check_int("max_distance", max_distance, minimum=1)
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be larger than the exact zone ({max_exact} distances for num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}), got {max_distance}"
        )
    return bidirectional, int(num_buckets), max_distance


def _t5_bucket(rel: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """Unchecked kernel of :func:`t5_relative_bucket`; ``rel`` is any integer tensor."""
    # int64 first: uint8/int16 inputs would wrap in abs() and negation. Every distance of at
    # least max_distance lands in the last bucket, so clamping there changes no bucket and
    # keeps abs() away from int64's minimum (whose absolute value overflows).
    rel = rel.long().clamp(-max_distance, max_distance)
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


def t5_relative_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    r"""T5's bucket index for each relative position (Raffel et al., 2020, arXiv:1910.10683).

    ``relative_position`` is key position minus query position (:mod:`posenc.positions`).
    With ``bidirectional`` the buckets are split in half: keys after the query (r = n - m > 0)
    use the upper half. Otherwise only keys at or before the query count (later ones fall in
    bucket 0). Within a direction with ``N`` buckets and distance :math:`\rho = |r|`:

    .. math::

        \text{bucket}(r) =
        \begin{cases}
            \rho & \rho < N/2 \quad\text{(exact zone)} \\
            \min\!\Big(N - 1,\ N/2 + \Big\lfloor \frac{\ln(\rho / (N/2))}{\ln(\text{max\_distance} / (N/2))}
                \,(N - N/2) \Big\rfloor\Big) & \text{otherwise (logarithmic zone)}
        \end{cases}

    so every distance of at least about ``max_distance`` shares the last bucket. The arithmetic is
    that of Hugging Face transformers' ``T5Attention._relative_position_bucket`` (float32 log,
    truncation), so the buckets are identical to it for every integer input.

    Shapes:
        relative_position: any shape, any integer dtype (converted to int64); returns the same
        shape, int64, in ``[0, num_buckets)``.
    """
    check_integer_tensor("relative_position", relative_position)
    bidirectional, num_buckets, max_distance = _check_bucket_settings(bidirectional, num_buckets, max_distance)
    return _t5_bucket(relative_position, bidirectional, num_buckets, max_distance)


class T5RelativeBias(nn.Module):
    r"""T5's relative attention bias: one learned scalar per (bucket, head), added to the logits.

    .. math::

        B_{h,mn} = \phi_h(\text{bucket}(n - m)), \qquad m = \text{offset} + i,\ n = j

    (arXiv:1910.10683, section 2.1; the book's relative-position chapter). T5 computes it once, in the first layer, and
    shares it with every layer. Two ways to read it, with one layout, heads first:

    * :meth:`distance_bias` maps any integer tensor of relative positions ``(...)`` to ``(h, ...)`` (or,
      given ``head``, to that head's values): the per-distance form, usable inside a
      FlexAttention ``score_mod`` (``score + t5.distance_bias(kv_idx - q_idx, head)``);
    * ``forward(q_len, k_len, offset=None)`` returns the ``(h, s_q, s_k)`` matrix, equal to
      ``distance_bias(relative_positions(q_len, k_len, offset=offset))``. It looks up only the
      ``s_q + s_k - 1`` distinct relative positions: the bias depends on r = n - m alone, so the
      matrix is Toeplitz and each diagonal is one value.

    Positions follow :mod:`posenc.positions` (``offset=None``: queries are the last ``s_q`` keys).

    Shapes:
        ``weight`` is ``(num_buckets, h)``; ``distance_bias(rel)``: ``(...)`` -> ``(h, ...)``;
        ``distance_bias(rel, head)``: ``(...)``;
        ``forward`` returns ``(h, s_q, s_k)``, in ``weight``'s dtype and device.
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

    def _bias(self, rel: Tensor, head: Tensor | int | None = None) -> Tensor:
        """Unchecked kernel of :meth:`distance_bias`."""
        buckets = _t5_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)  # (...), int64
        if head is None:
            return self.weight[buckets].movedim(-1, 0)  # (..., h) -> (h, ...)
        return self.weight[buckets, head]  # one value per (position, head) pair: broadcast of both shapes

    def distance_bias(self, relative_position: Tensor, head: Tensor | int | None = None) -> Tensor:
        """Per-head bias for each relative position (key minus query): ``w[bucket(r), h]``.

        Without ``head``, every head: ``(...)`` -> ``(h, ...)``, the layout of :meth:`forward`. With
        ``head`` (an int, or an integer tensor that broadcasts with ``relative_position``), only
        that head's values, ``w[bucket(r), head]``. Only metadata is checked for tensors (dtype,
        device), never values, so it runs under ``vmap`` and ``torch.compile``; a FlexAttention
        ``score_mod`` is ``score + t5.distance_bias(kv_idx - q_idx, head)``. (``t5.distance_bias(kv_idx - q_idx)[head]``
        gives the same values eagerly, but torch 2.13's compiled CPU FlexAttention cannot lower
        that double indexing; the ``head`` argument is one index.) A ``head`` tensor's values must
        lie in ``[0, h)``: they are not checked.

        Shapes:
            relative_position: any shape ``(...)``, any integer dtype; returns ``(h, ...)``, or with
            ``head`` the broadcast shape of ``relative_position`` and ``head``.
        """
        check_integer_tensor("relative_position", relative_position)
        if relative_position.device != self.weight.device:
            raise ValueError(
                f"relative_position must be on the bias's device {self.weight.device}, got {relative_position.device}"
            )
        if isinstance(head, Tensor):
            check_integer_tensor("head", head)
            if head.device != self.weight.device:
                raise ValueError(f"head must be on the bias's device {self.weight.device}, got {head.device}")
            head = head.long()  # a uint8 index would be read as a boolean mask
        elif head is not None:
            head = check_int("head", head, minimum=0)
            if head >= self.num_heads:
                raise ValueError(f"head must be < num_heads={self.num_heads}, got {head}")
        return self._bias(relative_position, head)

    def forward(self, q_len: int, k_len: int, *, offset: int | None = None) -> Tensor:
        """The ``(h, s_q, s_k)`` bias for queries at ``offset + i`` and keys at ``j`` (offset=None: ``k_len - q_len``).

        Shapes:
            returns ``(h, s_q, s_k)``, equal to ``self.distance_bias(relative_positions(q_len, k_len, offset=offset))``.
        """
        offset = resolve_offset(q_len, k_len, offset)
        q_len, k_len = int(q_len), int(k_len)
        # Every relative position that occurs, from the bottom-left corner (first key, last
        # query) to the top-right one (last key, first query): s_q + s_k - 1 values.
        rel = torch.arange(-(offset + q_len - 1), k_len - offset, device=self.weight.device)  # (s_q + s_k - 1,)
        values = self._bias(rel)  # (h, s_q + s_k - 1): the value on each diagonal
        # Row i is the window of k_len values that starts at relative position -(offset + i):
        # windows taken left to right are rows bottom to top, so flip them.
        return values.unfold(-1, k_len, 1).flip(-2)  # (h, s_q, s_k)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )


def _shaw_indices(q_len: int, k_len: int, max_relative: int, offset: int, device: torch.device | None) -> Tensor:
    """Unchecked kernel of :func:`shaw_relative_indices`."""
    rel = relative_position_matrix(q_len, k_len, offset, device)  # (s_q, s_k)
    return rel.clamp(-max_relative, max_relative) + max_relative  # (s_q, s_k), int64 in [0, 2k]


def shaw_relative_indices(q_len: int, k_len: int, max_relative: int, *, offset: int | None = None) -> Tensor:
    """Row index into Shaw et al.'s tables for each (query, key) pair: ``clip(r, -c, c) + c``.

    r = n - m = ``j - (offset + i)`` as in :mod:`posenc.positions` (``offset=None``:
    ``k_len - q_len``); the clip distance c is ``max_relative`` (arXiv:1803.02155, eq. 5).

    Shapes:
        returns ``(s_q, s_k)``, int64, in ``[0, 2c]``.
    """
    offset = resolve_offset(q_len, k_len, offset)
    max_relative = check_int("max_relative", max_relative, minimum=1)
    return _shaw_indices(int(q_len), int(k_len), max_relative, offset, None)


def _check_shaw(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, causal: object, offset: object
) -> tuple[int, int]:
    """Validate Shaw et al.'s inputs; return ``max_relative`` (k) and the resolved offset."""
    _b, _h, s_q, s_k, d = check_qkv(q, k, v)
    check_tensor("rel_k", rel_k, ndim=2, floating=True)
    check_tensor("rel_v", rel_v, ndim=2, floating=True)
    for name, table in (("rel_k", rel_k), ("rel_v", rel_v)):
        if table.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {table.device}")
    check_bool("causal", causal)
    offset = resolve_offset(s_q, s_k, offset)
    r = rel_k.shape[0]
    if r < 3 or r % 2 == 0:
        raise ValueError(f"rel_k must have 2k + 1 rows with k >= 1 (distances -k..k), got {r} rows")
    if rel_k.shape[1] != d:
        raise ValueError(f"rel_k must be (2k + 1, d) with d = {d}, got {tuple(rel_k.shape)}")
    if rel_v.shape != (r, v.shape[-1]):
        raise ValueError(f"rel_v must be (2k + 1, d_v) = {(r, v.shape[-1])}, got {tuple(rel_v.shape)}")
    return (r - 1) // 2, offset


def shaw_attention_naive(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, *, causal: bool = False, offset: int | None = None
) -> tuple[Tensor, Tensor]:
    r"""Shaw et al.'s relative attention, computed as written (arXiv:1803.02155, eqs. 3-4).

    .. math::

        e_{mn} = \frac{q_m \cdot (k_n + \omega^K_{\operatorname{clip}(n - m,\,-c,\,c)})}{\sqrt{d}}, \qquad
        z_m = \sum_n a_{mn}\,(v_n + \omega^V_{\operatorname{clip}(n - m,\,-c,\,c)}), \qquad
        a_{mn} = \operatorname{softmax}_n(e_{mn})

    with m = ``offset + i`` and n = ``j``. The tables ``rel_k`` and ``rel_v`` (the vectors
    :math:`\omega^K_r`, :math:`\omega^V_r`) hold 2c + 1 vectors shared by all heads. This version
    materialises the per-pair vectors as ``(s_q, s_k, d)`` tensors: its memory grows
    as ``s_q * s_k * d``. :func:`shaw_attention` gives the same result without them.

    Positions follow :mod:`posenc.positions`: ``offset=None`` means ``s_k - s_q`` (the queries are
    the last ``s_q`` positions, a KV-cache decode step); with ``causal`` query ``i`` sees keys
    ``j <= offset + i``. Precision as :func:`posenc.scaled_dot_product_attention`: computed in
    ``promote_types(q, rel_k, rel_v, float32)`` (float16/bfloat16 inputs are cast up), ``q`` scaled
    by ``d^{-1/2}`` before the products; output and weights are returned in q's dtype.

    Shapes:
        q ``(b, h, s_q, d)``, k ``(b, h, s_k, d)``, v ``(b, h, s_k, d_v)``, rel_k ``(2c+1, d)``,
        rel_v ``(2c+1, d_v)``; returns output ``(b, h, s_q, d_v)`` and weights ``(b, h, s_q, s_k)``.
    """
    max_relative, offset = _check_shaw(q, k, v, rel_k, rel_v, causal, offset)
    s_q, s_k, d = q.shape[2], k.shape[2], q.shape[3]
    index = _shaw_indices(s_q, s_k, max_relative, offset, q.device)  # (s_q, s_k)
    dtype, work = q.dtype, logits_dtype(q.dtype, torch.promote_types(rel_k.dtype, rel_v.dtype))
    q, k, v, rel_k, rel_v = (t.to(work) for t in (q, k, v, rel_k, rel_v))  # (b, h, s, d), tables (2k+1, d)
    a_k, a_v = rel_k[index], rel_v[index]  # (s_q, s_k, d), (s_q, s_k, d_v)
    q = q * d**-0.5  # scale before the products: no intermediate larger than the logits
    logits = q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, a_k)  # (b, h, s_q, s_k)
    allowed = causal_mask_matrix(s_q, s_k, offset, q.device) if causal else None  # (s_q, s_k)
    weights = masked_softmax(logits, allowed)  # (b, h, s_q, s_k)
    out = weights @ v + torch.einsum("bhij,ijd->bhid", weights, a_v)  # (b, h, s_q, d_v)
    return out.to(dtype), weights.to(dtype)


def shaw_attention(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, *, causal: bool = False, offset: int | None = None
) -> tuple[Tensor, Tensor]:
    r"""Shaw et al.'s relative attention without materialising any ``(s_q, s_k, d)`` tensor.

    Two rearrangements (the idea behind Music Transformer's "skewing", arXiv:1809.04281):

    * keys: :math:`q_m \cdot \omega^K_{\operatorname{clip}(n - m)}` takes only 2c + 1 values per query,
      so compute the ``(s_q, 2c+1)`` products ``q @ rel_k.T`` once and gather them into place;
    * values: :math:`\sum_n a_{mn} \omega^V_{\operatorname{clip}(n-m)} = \sum_r \big(\sum_{n:\,
      \operatorname{clip}(n - m) = r} a_{mn}\big) \omega^V_r`, so add the weights up per distance
      (scatter-add to ``(s_q, 2c+1)``) and multiply by ``rel_v``.

    Besides the attention matrix itself, the extra memory is ``O(s_q (2c+1))`` per head plus one
    shared ``(s_q, s_k)`` index: nothing grows with ``s_q * s_k * d``. Equal to
    :func:`shaw_attention_naive` up to rounding; same ``offset`` and ``causal`` conventions.

    Shapes:
        as :func:`shaw_attention_naive`.
    """
    max_relative, offset = _check_shaw(q, k, v, rel_k, rel_v, causal, offset)
    b, h, s_q, d = q.shape
    s_k = k.shape[2]
    index = _shaw_indices(s_q, s_k, max_relative, offset, q.device)  # (s_q, s_k), int64
    index = index.expand(b, h, s_q, s_k)  # a view: no copy
    dtype, work = q.dtype, logits_dtype(q.dtype, torch.promote_types(rel_k.dtype, rel_v.dtype))
    q, k, v, rel_k, rel_v = (t.to(work) for t in (q, k, v, rel_k, rel_v))  # (b, h, s, d), tables (2k+1, d)
    q = q * d**-0.5  # scale before the products: no intermediate larger than the logits
    q_rel = q @ rel_k.T  # (b, h, s_q, 2k+1): q_i . w^K_r / sqrt(d) for every clipped distance r
    logits = q @ k.transpose(-2, -1) + q_rel.gather(-1, index)  # (b, h, s_q, s_k)
    allowed = causal_mask_matrix(s_q, s_k, offset, q.device) if causal else None  # (s_q, s_k)
    weights = masked_softmax(logits, allowed)  # (b, h, s_q, s_k)
    weight_per_distance = torch.zeros_like(q_rel).scatter_add_(-1, index, weights)  # (b, h, s_q, 2k+1)
    out = weights @ v + weight_per_distance @ rel_v  # (b, h, s_q, d_v)
    return out.to(dtype), weights.to(dtype)
