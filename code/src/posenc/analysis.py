r"""Reading a trained RoPE head: which pairs carry its logit, and where they repeat themselves.

Book: the lab (``book/09_lab.ipynb``), the RoPE failure past ``L_0``. Write pair ``i`` of a query
and a key as complex numbers, :math:`\hat q_i = q_a + \mathrm{i}\, q_b` and
:math:`\hat k_i = k_a + \mathrm{i}\, k_b` (``(a, b)`` the pair's two features: ``(i, i + d/2)`` for
``pairing="half"``, ``(2i, 2i + 1)`` for ``"interleaved"``, as in :mod:`posenc.rope`). RoPE turns
pair ``i`` at position ``m`` by :math:`e^{\mathrm{i} m \theta_i}`, so the logit of query ``m`` and
key ``n`` is a sum over pairs

.. math::

    \langle R_m q, R_n k \rangle = \sum_i c_i(r), \qquad
    c_i(r) = \operatorname{Re}\!\big(\chi_i\, e^{-\mathrm{i} r \theta_i}\big), \qquad
    \chi_i = \hat q_i\, \overline{\hat k_i},
    \qquad r = n - m

(key position minus query position, T5's sign, as everywhere in posenc: a key ``t`` places back has
``r = -t``). :func:`rope_pair_logits` returns the ``c_i``. Two rules read them, both fixed before
looking at a model's accuracy:

* :func:`carrying_pairs`: the fewest pairs whose absolute contributions :math:`|c_i|` add up to at
  least ``share`` (e.g. 90 %) of :math:`\sum_i |c_i|` at the trained distance;
* :func:`alias_distance`: the first distance past the trained one where every carrying pair's angle
  is back within ``tol`` of its angle at the trained distance, i.e. :math:`(t - t_0)\theta_i` is
  within ``tol`` of a whole number of turns for every carrying ``i``. There the carrying part of the
  logit repeats its value at ``t_0``: the predicted place of an aliased (wrong) attention peak.

Shapes:
    d: head dim (even), p: pairs (``d / 2``), ``...``: any leading dimensions.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

from posenc._checks import check_int, check_tensor, has_values

__all__ = ["alias_distance", "carrying_pairs", "rope_pair_logits"]

_PAIRINGS = ("half", "interleaved")  # posenc.rope.PAIRINGS: the same two conventions


def _pairs(x: Tensor, pairing: str) -> Tensor:
    """The pairs of ``x`` as complex numbers ``x_a + i x_b`` (the book's hat-q, hat-k).

    Shapes: ``(..., d)`` -> ``(..., p)``.
    """
    if pairing == "half":
        a, b = x.chunk(2, dim=-1)  # (..., p) each: features i and i + d/2
    else:
        a, b = x[..., 0::2], x[..., 1::2]  # (..., p) each: features 2i and 2i + 1
    return torch.complex(a, b)  # (..., p)


def rope_pair_logits(
    q: Tensor,
    k: Tensor,
    distance: int | Tensor,
    inv_freq: Tensor,
    *,
    pairing: str = "half",
    attention_scale: float = 1.0,
) -> Tensor:
    r"""Per-pair contributions :math:`c_i(r) = \operatorname{Re}(\chi_i e^{-\mathrm{i} r \theta_i})` of a RoPE logit.

    :math:`\chi_i = \hat q_i \overline{\hat k_i}` (the module docstring).
    ``q`` and ``k`` are an unrotated query and key (after the projection, before RoPE); ``distance``
    is ``r = n - m``, key position minus query position (negative for a key before the query), an
    int or an integer tensor that broadcasts against the leading dimensions. ``inv_freq`` holds the
    ``theta_i`` (e.g. ``RotaryEmbedding.inv_freq`` or :func:`posenc.rope_inv_freq`). The sum over
    the last dimension is the RoPE logit ``<R_m q, R_n k>`` for any ``m, n`` with ``n - m = r``
    (before the ``1 / sqrt(d)`` of attention); ``attention_scale`` is YaRN's factor on cos and sin,
    which multiplies the logit by its square. Computed in the dtype of ``q``.

    Shapes:
        q, k ``(..., d)`` (broadcast); distance ``()`` or ``(...)``; inv_freq ``(p,)`` with
        ``p = d / 2``; returns ``(..., p)``.
    """
    check_tensor("q", q, floating=True)
    check_tensor("k", k, floating=True)
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if q.dim() == 0 or k.dim() == 0:
        raise ValueError(f"q and k need a feature dimension, got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"q and k must have the same head dim, got {d} and {k.shape[-1]}")
    if d % 2 or inv_freq.shape[0] != d // 2:
        raise ValueError(
            f"inv_freq must hold head_dim / 2 = {d / 2:g} frequencies for an even head dim, "
            f"got {inv_freq.shape[0]} for head dim {d}"
        )
    if not isinstance(pairing, str) or pairing not in _PAIRINGS:
        raise ValueError(f"pairing must be one of {_PAIRINGS}, got {pairing!r}")
    if (
        isinstance(attention_scale, bool)
        or not isinstance(attention_scale, numbers.Real)
        or not math.isfinite(attention_scale)
    ):
        raise TypeError(f"attention_scale must be a finite real number, got {attention_scale!r}")
    if isinstance(distance, Tensor):
        if distance.dtype.is_floating_point or distance.dtype == torch.bool or distance.is_complex():
            raise TypeError(f"distance must be an integer tensor, got {distance.dtype}")
        r = distance.to(device=q.device, dtype=q.dtype)[..., None]  # (..., 1)
    else:
        r = torch.tensor(float(check_int("distance", distance)), dtype=q.dtype, device=q.device)
    dtype = q.dtype
    angle = r * inv_freq.to(device=q.device, dtype=dtype)  # (..., p): r theta_i
    z_q, z_k = _pairs(q, pairing), _pairs(k.to(dtype), pairing)  # (..., p) complex
    turned = torch.polar(torch.ones_like(angle), angle)  # (..., p): e^{i r theta_i}
    return (z_q.conj() * z_k * turned).real * float(attention_scale) ** 2  # (..., p)


def carrying_pairs(contributions: Tensor, share: float = 0.9) -> Tensor:
    r"""The fewest pairs whose :math:`|c_i|` add up to at least ``share`` of :math:`\sum_i |c_i|`.

    Pairs are taken in order of decreasing :math:`|c_i|` (ties: lower index first) until their sum
    reaches ``share`` of the total; the result lists their indices in increasing order. For several
    queries and keys, pass one row of contributions (e.g. the mean of ``|c_i|`` over them): the
    rule reads magnitudes, so signs cancel nowhere.

    Shapes:
        contributions ``(p,)`` real; returns ``(k,)`` int64 pair indices, ``1 <= k <= p``.
    """
    check_tensor("contributions", contributions, ndim=1, floating=True)
    if contributions.numel() == 0:
        raise ValueError("contributions must hold at least one pair, got none")
    if has_values(contributions) and not bool(contributions.isfinite().all()):
        raise ValueError("contributions must be finite")
    if isinstance(share, bool) or not isinstance(share, numbers.Real) or not 0.0 < share <= 1.0:
        raise ValueError(f"share must be a real number in (0, 1], got {share!r}")
    size = contributions.abs().double()  # (p,)
    total = float(size.sum())
    if total == 0.0:
        raise ValueError("contributions are all zero: no pair carries the logit")
    order = torch.sort(-size, stable=True).indices  # (p,) largest first, ties by index
    running = torch.cumsum(size[order], dim=0)  # (p,)
    # the first prefix that reaches the share (a tiny slack for the rounding of the cumulative sum)
    count = int((running < share * total * (1 - 1e-12)).sum()) + 1
    return torch.sort(order[:count]).values  # (k,)


def alias_distance(
    inv_freq: Tensor,
    pairs: Tensor | list[int],
    *,
    trained: int,
    max_distance: int,
    tol: float,
) -> int | None:
    r"""The first distance ``t > trained`` where every pair in ``pairs`` is back at its trained angle.

    Distances count back from the query (``t = m - n = -r``); the angle of pair ``i`` moves by
    :math:`(t - t_0)\theta_i` from the trained distance :math:`t_0` = ``trained``. Returns the
    smallest ``t`` in ``trained + 1 .. max_distance`` where, for every ``i`` in ``pairs``, that angle
    is within ``tol`` radians of a whole number of turns (wrapped to :math:`(-\pi, \pi]`), or None
    if there is none. Computed in float64.

    Shapes:
        inv_freq ``(p,)``; pairs ``(k,)`` indices into it; returns an int or None.
    """
    check_tensor("inv_freq", inv_freq, ndim=1, floating=True)
    pairs = torch.as_tensor(pairs)
    if pairs.dim() != 1 or pairs.numel() == 0 or pairs.dtype.is_floating_point or pairs.dtype == torch.bool:
        raise ValueError(f"pairs must be a non-empty 1-D list of pair indices, got {pairs.tolist()!r}")
    if int(pairs.min()) < 0 or int(pairs.max()) >= inv_freq.shape[0]:
        raise ValueError(f"pairs must index the {inv_freq.shape[0]} frequencies, got {pairs.tolist()}")
    trained = check_int("trained", trained, minimum=0)
    max_distance = check_int("max_distance", max_distance, minimum=trained + 1)
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0.0 < tol < math.pi:
        raise ValueError(f"tol must be an angle in (0, pi) radians, got {tol!r}")
    theta = inv_freq.detach().double().cpu()[pairs.cpu()]  # (k,)
    moved = torch.arange(1, max_distance - trained + 1, dtype=torch.float64)[:, None] * theta  # (T, k)
    wrapped = torch.remainder(moved + math.pi, 2 * math.pi) - math.pi  # (T, k) in [-pi, pi)
    back = (wrapped.abs() <= tol).all(-1)  # (T,)
    if not bool(back.any()):
        return None
    return trained + 1 + int(back.nonzero()[0])
