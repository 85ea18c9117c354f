r"""Where queries and keys sit: the one position convention of posenc.

Convention (every function of posenc that relates queries to keys follows it):

* key ``j`` sits at absolute position ``j``, for ``j = 0 .. s_k - 1``;
* query ``i`` sits at absolute position ``offset + i``, for ``i = 0 .. s_q - 1``;
* the relative position of key ``j`` seen from query ``i`` is key position minus query position,
  ``j - (offset + i)`` (T5's sign): negative values point to earlier tokens;
* causal attention lets query ``i`` see key ``j`` iff ``j <= offset + i`` (relative position <= 0);
* ``offset=None`` (the default) means ``offset = s_k - s_q``: the queries are the **last** ``s_q``
  of the ``s_k`` positions (bottom-right alignment). This is what decoding with a KV cache needs
  (one new query after ``s_k - 1`` cached keys: ``offset = s_k - 1``) and, for ``s_q == s_k``, it is
  the usual ``offset = 0``. So a mask, a bias and a relative-position matrix made with default
  arguments line up with each other for a decode step or a chunk of prefill.

An explicit ``offset`` is an integer ``>= 0``; it is needed when ``s_q > s_k`` (the default would
be negative) or when the queries are not the last positions (e.g. ``offset=0``: top-left).

.. math::

    r_{ij} = j - (\text{offset} + i), \qquad \text{offset} = s_k - s_q \ \text{by default}

Book: the relative-position chapter (``book/04_relative.ipynb``, relative-position matrix and KV
cache sections). In the book's notation a query row i is at position m = offset + i, a key column
j at n = j, and the relative position is r = n - m.

Shapes:
    s_q: query length, s_k: key length. Both functions here return ``(s_q, s_k)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._checks import MAX_INT, check_int

__all__ = ["causal_mask", "causal_mask_matrix", "relative_position_matrix", "relative_positions", "resolve_offset"]

# Positions and their differences are int64; keeping every position below 2**62 means no
# difference j - (offset + i) can overflow (the bound of every integer argument of posenc).
MAX_POSITION = MAX_INT


def resolve_offset(q_len: object, k_len: object, offset: object = None) -> int:
    """Validate ``q_len``, ``k_len`` and ``offset``; return the absolute position of query 0.

    ``offset=None`` gives ``k_len - q_len`` (queries are the last ``q_len`` of ``k_len`` positions);
    with ``q_len > k_len`` that would be negative, so it raises and asks for an explicit offset.
    Every public function of posenc that takes an ``offset`` resolves it here.
    """
    q_len = check_int("q_len", q_len, minimum=1)
    k_len = check_int("k_len", k_len, minimum=1)
    if offset is None:
        if q_len > k_len:
            raise ValueError(
                f"offset=None puts the queries at the last q_len of k_len positions, which needs "
                f"q_len <= k_len; got q_len={q_len}, k_len={k_len}: pass offset explicitly (e.g. offset=0)"
            )
        offset = k_len - q_len
    else:
        offset = check_int("offset", offset, minimum=0)
    if offset + q_len > MAX_POSITION or k_len > MAX_POSITION:
        raise ValueError(f"positions must stay below 2**62, got offset={offset}, q_len={q_len}, k_len={k_len}")
    return offset


def relative_position_matrix(q_len: int, k_len: int, offset: int, device: torch.device | str | None = None) -> Tensor:
    """The unchecked kernel of :func:`relative_positions` (ints already validated, e.g. by :func:`resolve_offset`).

    Shapes:
        returns ``(s_q, s_k)`` int64: key position minus query position.
    """
    queries = torch.arange(offset, offset + q_len, device=device)[:, None]  # (s_q, 1): absolute query positions
    keys = torch.arange(k_len, device=device)[None, :]  # (1, s_k): absolute key positions
    return keys - queries  # (s_q, s_k)


def causal_mask_matrix(q_len: int, k_len: int, offset: int, device: torch.device | str | None = None) -> Tensor:
    """The unchecked kernel of :func:`causal_mask` (ints already validated, e.g. by :func:`resolve_offset`).

    Shapes:
        returns ``(s_q, s_k)`` bool: True where key position <= query position.
    """
    # Row i is allowed up to key offset + i: a lower triangle shifted right by offset.
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)  # (s_q, s_k)


def relative_positions(
    q_len: int, k_len: int, *, offset: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """The matrix of relative positions ``r_ij = j - (offset + i)``: key position minus query position.

    See the module docstring for the convention (``offset=None`` means ``k_len - q_len``).

    Shapes:
        returns ``(s_q, s_k)``, int64.
    """
    offset = resolve_offset(q_len, k_len, offset)
    return relative_position_matrix(int(q_len), int(k_len), offset, device)


def causal_mask(
    q_len: int, k_len: int, *, offset: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """Boolean mask that lets each query see only keys at or before its own position.

    Query ``i`` (at position ``offset + i``) may attend to key ``j`` iff ``j <= offset + i``, i.e.
    iff ``relative_positions(q_len, k_len, offset=offset) <= 0``. With the default ``offset=None``
    (``k_len - q_len``, bottom-right) the last query sees every key, as in a KV-cache decode step;
    for ``q_len == k_len`` this is the usual lower-triangular mask. Since ``offset >= 0``, every
    query sees at least key 0, so no row is fully masked.

    Shapes:
        returns ``(s_q, s_k)``, bool, ``True`` where attention is allowed.
    """
    offset = resolve_offset(q_len, k_len, offset)
    return causal_mask_matrix(int(q_len), int(k_len), offset, device)
