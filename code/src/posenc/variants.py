r"""Variants of RoPE and of position in attention found in 2024-2026 models: p-RoPE, interleaved NoPE
layers (Llama 4's iRoPE), contextual positions (CoPE) and FIRE's normalised-distance bias.

Book: the chapter on today's variants (``book/08_variants.ipynb``).

* **p-RoPE** (Barbero et al., "Round and Round We Go! What makes Rotary Positional Encodings useful?",
  arXiv:2410.06205): keep the fastest fraction ``p`` of RoPE's frequencies and set the rest to zero, so
  the slowest pairs are not rotated at all:

  .. math::

      \theta^{(p)}_i = \begin{cases} \text{base}^{-2i/d} & i < \lfloor p\, d/2 \rfloor \\ 0 & \text{otherwise}
      \end{cases}

  ``p = 1`` is RoPE, ``p = 0`` is NoPE. GPT-NeoX's partial rotary (``partial_rotary_factor``,
  :func:`posenc.rope_inv_freq`) differs: it rotates ``d_rot`` features with the frequencies
  :math:`\text{base}^{-2i/d_{\text{rot}}}`, which still reach down to slow ones.
* **Interleaved NoPE layers** (Llama 4, "iRoPE"): every ``nope_every``-th layer (layers ``l`` with
  ``(l + 1) % nope_every == 0``; transformers' ``no_rope_layer_interval = 4``) attends without any
  position; the others use RoPE. Llama 4 also multiplies the queries of its NoPE layers by
  :func:`llama4_attention_scale` and restricts its RoPE layers to chunks of 8192 tokens. In the lab model
  it is the registered scheme ``TinyTransformer(..., position="irope")`` (:class:`InterleavedRoPE`,
  defined with :func:`irope_layers` in :mod:`posenc.models`).
* **CoPE** (Golovneva et al., "Contextual Position Encoding", arXiv:2405.18719): a gate
  :math:`g_{mt} = \sigma(q_m^\top k_t/\sqrt{d})` per query and key (the content part of the logit only),
  the contextual position of key ``n`` seen from query ``m`` is :math:`\nu_{mn} = \sum_{t=n}^{m} g_{mt}`,
  and the logit gains the position term :math:`\xi_m(\nu_{mn})`: :math:`q_m^\top u_j` of the learned
  rows :math:`u_j` (``pos_emb``), read between integer rows ``j`` by linear interpolation. (The book
  keeps :math:`z_m` for the attention output.)
* **FIRE** (Li et al., "Functional Interpolation for Relative Positions Improves Long Context
  Transformers", arXiv:2310.04418): a logit bias from a small MLP of the normalised distance,

  .. math::

      B_{mn} = \operatorname{MLP}\!\left(\frac{\psi(m - n)}{\psi(\max(m, L_{\text{thr}}))}\right), \qquad
      \psi(x) = \ln(\eta x + 1),

  whose input stays in [0, 1] for every causal pair at any length (progressive interpolation).

Shapes:
    b: batch, h: heads, s: sequence length, d: head dim, P: rows of CoPE's position table.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posenc._checks import check_even_dim, check_int, check_real, check_tensor, has_values
from posenc.models import InterleavedRoPE, TinyTransformer, irope_layers
from posenc.rope import apply_rope
from posenc.rope_scaling import Proportional

__all__ = [
    "FIREBias",
    "InterleavedRoPE",
    "apply_p_rope",
    "cope_attention",
    "cope_logits",
    "cope_positions",
    "fire_normalized_distance",
    "irope_layers",
    "irope_transformer",
    "llama4_attention_scale",
    "p_rope_inv_freq",
]


# ---- p-RoPE ----------------------------------------------------------------------------------------


def _p_rope_spec(p: object) -> Proportional:
    p = check_real("p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return Proportional(partial_rotary_factor=p)


def p_rope_inv_freq(head_dim: int, *, p: float, base: float = 10000.0) -> Tensor:
    r"""p-RoPE's frequencies: :math:`\theta_i = \text{base}^{-2i/d}` for the first ``floor(p d/2)`` pairs, 0 after.

    A pair with frequency 0 is never rotated: it carries content only (arXiv:2410.06205). This is
    transformers' ``proportional`` RoPE type, :class:`posenc.rope_scaling.Proportional` with
    ``partial_rotary_factor = p`` (Gemma 4's global layers: ``p = 0.25``).

    Shapes:
        returns ``(d/2,)`` float32.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    spec = _p_rope_spec(p)
    base = check_real("base", base, greater_than=1.0)
    return spec.inv_freq(head_dim, base)


def apply_p_rope(x: Tensor, positions: Tensor, *, p: float, base: float = 10000.0) -> Tensor:
    """Rotate ``x`` by p-RoPE (pairs ``(i, i + d/2)``): RoPE on the fast pairs, the slow pairs unchanged.

    :func:`posenc.apply_rope` with the ``proportional`` spec of :func:`p_rope_inv_freq`.

    Shapes:
        x ``(b, h, s, d)``; positions ``(s,)`` or ``(b, s)`` integers >= 0; returns ``(b, h, s, d)``.
    """
    check_tensor("x", x, ndim=4, floating=True)
    return apply_rope(x, positions, base=check_real("base", base, greater_than=1.0), scaling=_p_rope_spec(p))


# ---- Interleaved NoPE layers (Llama 4) --------------------------------------------------------------
# The layer pattern (irope_layers) and the lab scheme (InterleavedRoPE, position="irope") live in
# posenc.models, where the scheme is registered; they are re-exported here.


def llama4_attention_scale(positions: Tensor, *, floor_scale: int = 8192, attn_scale: float = 0.1) -> Tensor:
    r"""Llama 4's query scale on its NoPE layers: :math:`1 + \beta \ln(1 + \lfloor (m + 1)/F \rfloor)`.

    ``F = floor_scale`` (8192) and :math:`\beta` = ``attn_scale`` (0.1), as transformers' Llama 4
    (``attn_temperature_tuning``). It is exactly 1 for the first ``F - 1`` positions and grows
    logarithmically beyond, sharpening the softmax over long contexts.

    Shapes:
        positions ``(s,)`` integers >= 0; returns ``(s,)`` float32.
    """
    check_tensor("positions", positions, ndim=1)
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor, got {positions.dtype}")
    if has_values(positions) and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got minimum {int(positions.min())}")
    floor_scale = check_int("floor_scale", floor_scale, minimum=1)
    attn_scale = check_real("attn_scale", attn_scale)
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0


def irope_transformer(
    vocab_size: int, *, nope_every: int = 4, base: float = 10000.0, max_positions: int = 4096, **model_options
) -> TinyTransformer:
    """``TinyTransformer(vocab_size, position="irope", ...)``: the lab model with Llama 4's iRoPE layers.

    A shorthand for the registered scheme :class:`posenc.models.InterleavedRoPE`; ``nope_every``,
    ``base`` and ``max_positions`` are its ``position_options``, ``model_options`` are
    TinyTransformer's (``dim``, ``num_heads``, ``num_layers``, ``seed``, ``device``). The scheme holds
    no parameters, so the weights are the NoPE model's for the same ``seed``.
    """
    if "position" in model_options or "position_options" in model_options:
        raise ValueError("irope_transformer sets the position scheme itself; do not pass position or position_options")
    options = {"nope_every": nope_every, "base": base, "max_positions": max_positions}
    return TinyTransformer(vocab_size, position="irope", position_options=options, **model_options)


# ---- CoPE -----------------------------------------------------------------------------------------


def _causal_keep(s_q: int, s_k: int, device: torch.device) -> Tensor:
    # Queries are the last s_q of s_k positions: query row j sits at position s_k - s_q + j.
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).tril(s_k - s_q)  # (s_q, s_k)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """CoPE's compute dtype: ``promote_types(dtype, float32)``, as :func:`posenc.scaled_dot_product_attention`.

    A running sum of up to ``s`` gates in bfloat16 (8 significant bits) drifts by about 1 at
    ``s = 512``, and each step of drift moves the position across a row of the table.
    """
    return torch.promote_types(dtype, torch.float32)


def cope_positions(gates: Tensor) -> Tensor:
    r"""Contextual positions :math:`\nu_{mn} = \sum_{t=n}^{m} g_{mt}` for causal attention (arXiv:2405.18719).

    Query row ``j`` is position ``m = s_k - s_q + j`` (a decode step with ``s_q = 1`` is the last row
    of the full pass). Gates of keys after the query are ignored; there ``p`` is 0 (the mask removes
    those keys anyway). With gates 1 on the tokens of one kind and 0 elsewhere, :math:`\nu_{mn}` counts
    the tokens of that kind in positions ``n .. m``.

    Precision: the sum is taken in ``promote_types(gates.dtype, float32)`` and returned in the gates'
    dtype (a bfloat16 running sum would drift by about 1 over 512 keys).

    Shapes:
        gates ``(b, h, s_q, s_k)`` in [0, 1]; returns ``(b, h, s_q, s_k)``.
    """
    check_tensor("gates", gates, ndim=4, floating=True)
    s_q, s_k = gates.shape[-2:]
    if s_q > s_k:
        raise ValueError(f"gates must have s_q <= s_k (queries are the last s_q keys), got {s_q} > {s_k}")
    if has_values(gates) and not bool(((gates >= 0) & (gates <= 1)).all()):
        raise ValueError("gates must lie in [0, 1]")
    return _cope_positions(gates.to(_work_dtype(gates.dtype))).to(gates.dtype)


def _cope_positions(gates: Tensor) -> Tensor:
    # The sum over t >= n, in the gates' own dtype (callers pass float32 or float64).
    s_q, s_k = gates.shape[-2:]
    g = gates * _causal_keep(s_q, s_k, gates.device)  # (b, h, s_q, s_k): 0 after the query
    return g.flip(-1).cumsum(-1).flip(-1)  # (b, h, s_q, s_k): sum over t >= n


def _check_cope_inputs(q: object, k: object, pos_emb: object, v: object = None) -> None:
    check_tensor("q", q, ndim=4, floating=True)
    check_tensor("k", k, ndim=4, floating=True)
    if v is not None:
        check_tensor("v", v, ndim=4, floating=True)
    check_tensor("pos_emb", pos_emb, ndim=2, floating=True)
    named = [("q", q), ("k", k)] + ([("v", v)] if v is not None else [])
    if len({t.dtype for _, t in named}) > 1:
        names = ", ".join(n for n, _ in named[:-1]) + " and " + named[-1][0]
        raise TypeError(f"{names} must share one dtype, got " + ", ".join(f"{n} {t.dtype}" for n, t in named))
    placed = [*named, ("pos_emb", pos_emb)]
    if len({t.device for _, t in placed}) > 1:
        names = ", ".join(n for n, _ in placed[:-1]) + " and pos_emb"
        raise ValueError(f"{names} must be on one device, got " + ", ".join(f"{n} {t.device}" for n, t in placed))
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1] or q.shape[2] > k.shape[2]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share b, h, d, with s_q <= s_k")
    if v is not None and v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v {tuple(v.shape)} must match k {tuple(k.shape)} in b, h, s_k")
    if pos_emb.shape[-1] != q.shape[-1] or pos_emb.shape[0] < 2:
        raise ValueError(f"pos_emb must be (P, d) with P >= 2 and d = {q.shape[-1]}, got {tuple(pos_emb.shape)}")


def _cope_logits(q: Tensor, k: Tensor, pos_emb: Tensor) -> Tensor:
    # CoPE's logits in q's dtype (callers pass float32 or float64 tensors of one dtype).
    s_q, s_k, d = q.shape[2], k.shape[2], q.shape[-1]
    keep = _causal_keep(s_q, s_k, q.device)  # (s_q, s_k)
    content = (q @ k.transpose(-1, -2)) / math.sqrt(d)  # (b, h, s_q, s_k)
    p = _cope_positions(torch.sigmoid(content) * keep).clamp(max=pos_emb.shape[0] - 1)  # (b, h, s_q, s_k)
    rows = q @ pos_emb.T  # (b, h, s_q, P): q_m . u_j, the position term at integer j
    lower, upper = p.floor().long(), p.ceil().long()
    w = p - lower  # (b, h, s_q, s_k)
    position = rows.gather(-1, upper) * w + rows.gather(-1, lower) * (1 - w)  # (b, h, s_q, s_k): xi_m(nu)
    return (content + position).masked_fill(~keep, float("-inf"))


def cope_logits(q: Tensor, k: Tensor, pos_emb: Tensor) -> Tensor:
    r"""CoPE's logits: :math:`e_{mn} = q_m^\top k_n/\sqrt{d} + \xi_m(\nu_{mn})`, ``-inf`` after the query.

    As in the paper's code: the gates are :math:`\sigma` of the scaled content logits, the positions
    are clipped to ``P - 1``, and the position term :math:`q_m^\top u_j` (not scaled) is read between
    integer rows by linear interpolation, :math:`\xi_m(\nu) = (\nu - \lfloor \nu \rfloor)\, q_m^\top
    u_{\lceil \nu \rceil} + (1 - \nu + \lfloor \nu \rfloor)\, q_m^\top u_{\lfloor \nu \rfloor}`
    (``book/08_variants.ipynb``; the book keeps :math:`z_m` for the attention output).

    Precision: as :func:`posenc.scaled_dot_product_attention`, everything is computed in
    ``promote_types(q.dtype, float32)`` and the logits are returned in ``q``'s dtype; ``q`` and
    ``k`` must share one dtype, ``pos_emb`` (a learned table, often float32) may differ.

    Shapes:
        q ``(b, h, s_q, d)``, k ``(b, h, s_k, d)``, pos_emb ``(P, d)``; returns ``(b, h, s_q, s_k)``.
    """
    _check_cope_inputs(q, k, pos_emb)
    work = _work_dtype(q.dtype)
    return _cope_logits(q.to(work), k.to(work), pos_emb.to(work)).to(q.dtype)


def cope_attention(q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor) -> tuple[Tensor, Tensor]:
    """Causal attention with CoPE's logits (:func:`cope_logits`): output and weights.

    Precision: logits, softmax and the weighted sum are computed in ``promote_types(q.dtype,
    float32)``; output and weights are returned in ``q``'s dtype, which ``k`` and ``v`` share.

    Shapes:
        q ``(b, h, s_q, d)``, k, v ``(b, h, s_k, d)``, pos_emb ``(P, d)``; returns ``(b, h, s_q, d)``
        and ``(b, h, s_q, s_k)``.
    """
    _check_cope_inputs(q, k, pos_emb, v)
    work = _work_dtype(q.dtype)
    weights = torch.softmax(_cope_logits(q.to(work), k.to(work), pos_emb.to(work)), dim=-1)  # (b, h, s_q, s_k)
    return (weights @ v.to(work)).to(q.dtype), weights.to(q.dtype)  # (b, h, s_q, d), (b, h, s_q, s_k)


# ---- FIRE -------------------------------------------------------------------------------------------


def fire_normalized_distance(q_len: int, k_len: int, *, eta: float = 1.0, threshold: float = 512.0) -> Tensor:
    r"""FIRE's input :math:`\psi(m - n) / \psi(\max(m, L_{\text{thr}}))`, :math:`\psi(x) = \ln(\eta x + 1)`.

    Query row ``j`` is position ``m = k_len - q_len + j`` (a decode step is the last row of the full
    pass); entries with ``n > m`` (masked by causal attention) are 0. In the paper ``eta`` (its ``c``)
    and ``threshold`` (its ``L``) are learned; here they are arguments.

    Shapes:
        returns ``(s_q, s_k)`` float32 with ``s_q = q_len``, ``s_k = k_len``.
    """
    q_len = check_int("q_len", q_len, minimum=1)
    k_len = check_int("k_len", k_len, minimum=q_len)
    eta = check_real("eta", eta, greater_than=0.0)
    threshold = check_real("threshold", threshold, greater_than=0.0)
    m = torch.arange(k_len - q_len, k_len, dtype=torch.float64)[:, None]  # (s_q, 1): query positions
    n = torch.arange(k_len, dtype=torch.float64)[None]  # (1, s_k): key positions
    distance = (m - n).clamp(min=0)  # (s_q, s_k): m - n = -r >= 0 where the key is seen
    psi = torch.log1p(eta * distance)  # psi(m - n)
    norm = torch.log1p(eta * m.clamp(min=threshold))  # (s_q, 1): psi(max(m, L_thr))
    return (psi / norm).float()  # (s_q, s_k)


class FIREBias(nn.Module):
    """FIRE's bias for ``num_heads`` heads: an MLP ``1 -> hidden -> num_heads`` of the normalised distance.

    Shapes:
        forward(q_len, k_len) returns ``(h, s_q, s_k)``, ``-inf`` where ``n > m``: add it to the logits.
    """

    def __init__(self, num_heads: int, *, hidden: int = 32, eta: float = 1.0, threshold: float = 512.0):
        super().__init__()
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        self.eta = check_real("eta", eta, greater_than=0.0)
        self.threshold = check_real("threshold", threshold, greater_than=0.0)
        self.mlp = nn.Sequential(
            nn.Linear(1, check_int("hidden", hidden, minimum=1)), nn.ReLU(), nn.Linear(hidden, num_heads)
        )

    def forward(self, q_len: int, k_len: int) -> Tensor:
        x = fire_normalized_distance(q_len, k_len, eta=self.eta, threshold=self.threshold)  # (s_q, s_k)
        x = x.to(self.mlp[0].weight)
        bias = self.mlp(x[..., None]).permute(2, 0, 1)  # (h, s_q, s_k)
        keep = _causal_keep(q_len, k_len, bias.device)  # (s_q, s_k)
        return bias.masked_fill(~keep, float("-inf"))
