r"""Positions and masks for batches in practice: left padding, packed documents, streaming caches.

Book: the chapter "positions in practice" (``book/11_practice.ipynb``). A position scheme gives
each token the position it would have in its own document; these functions build those positions
and the matching masks when a row of the batch is not one document starting at column 0.

* Left padding (batched generation): position ``m`` of a token is the number of real tokens before
  it, ``cumsum(attention_mask) - 1``, not its column; transformers does the same in ``generate``
  (``GenerationMixin._prepare_position_ids_for_generation``).
* Packing: several documents in one row restart their positions at 0 and may only attend inside
  their own document (a block-diagonal causal mask); transformers' ``DataCollatorWithFlattening``
  builds the same position ids.
* Streaming with attention sinks (Xiao et al., StreamingLLM, arXiv:2309.17453): the cache keeps the
  first ``num_sinks`` tokens and the most recent ones; :func:`streaming_cache_indices` says which.

Masks are boolean, ``True`` where attention is allowed, like :func:`posenc.positions.causal_mask`;
:func:`additive_mask` turns one into the ``0 / -inf`` bias that
:func:`posenc.scaled_dot_product_attention` adds to the logits.

Shapes:
    b: batch, s: sequence length (columns of the batch), k: tokens kept in a cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc._checks import check_int, check_integer_tensor, check_tensor, float_dtype, has_values

__all__ = [
    "additive_mask",
    "document_causal_mask",
    "packed_document_ids",
    "packed_position_ids",
    "padding_causal_mask",
    "position_ids_from_mask",
    "streaming_cache_indices",
]


def _check_attention_mask(attention_mask: object) -> Tensor:
    """A ``(b, s)`` mask of 0/1 integers or bools, returned as bool."""
    check_tensor("attention_mask", attention_mask, ndim=2)
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be an integer or bool tensor, got {attention_mask.dtype}")
    if attention_mask.dtype != torch.bool and has_values(attention_mask):
        bad = attention_mask[(attention_mask != 0) & (attention_mask != 1)]
        if bad.numel():
            raise ValueError(f"attention_mask must hold only 0 and 1, got {bad[0].item()}")
    return attention_mask.bool()


def position_ids_from_mask(attention_mask: Tensor, *, pad_position: int = 0) -> Tensor:
    r"""Positions of the real tokens of each row: :math:`m = (\text{number of real tokens up to the column}) - 1`.

    ``attention_mask`` is 1 (or True) at real tokens and 0 at padding, as a tokenizer returns it.
    A real token's position counts only the real tokens before it, so a left-padded row gets the
    positions ``0, 1, 2, ...`` it would have without padding. Padded slots get ``pad_position``
    (default 0, as transformers' ``generate`` gives them); their value does not matter as long as
    the mask keeps every real query away from them (:func:`padding_causal_mask`).

    Shapes:
        attention_mask ``(b, s)`` 0/1 integers or bool; returns ``(b, s)`` int64.
    """
    mask = _check_attention_mask(attention_mask)
    pad_position = check_int("pad_position", pad_position, minimum=0)
    positions = mask.long().cumsum(-1) - 1  # (b, s): real tokens so far, minus one
    return positions.masked_fill(~mask, pad_position)  # (b, s)


def padding_causal_mask(attention_mask: Tensor) -> Tensor:
    """Causal mask that also hides padded keys: query column ``j`` sees key column ``l`` iff ``l <= j``, ``l`` real.

    A padded query would see no key at all under left padding (every column before it is padding),
    and a softmax over nothing is NaN; so each padded query may see itself. Its output is garbage
    that no real token reads. Columns index the batch, not positions: the mask is the same whatever
    positions the tokens carry.

    Shapes:
        attention_mask ``(b, s)`` 0/1 integers or bool; returns ``(b, s, s)`` bool (query, key).
    """
    mask = _check_attention_mask(attention_mask)
    s = mask.shape[1]
    causal = torch.ones(s, s, dtype=torch.bool, device=mask.device).tril()  # (s, s)
    allowed = causal & mask[:, None, :]  # (b, s, s): key columns that are real
    eye = torch.eye(s, dtype=torch.bool, device=mask.device)  # (s, s)
    return allowed | (eye & ~mask[:, :, None])  # (b, s, s): a padded query sees itself


def _check_lengths(doc_lengths: object) -> list[int]:
    if isinstance(doc_lengths, Tensor):
        check_integer_tensor("doc_lengths", doc_lengths)
        if doc_lengths.dim() != 1:
            raise ValueError(f"doc_lengths must be 1-D, got shape {tuple(doc_lengths.shape)}")
        doc_lengths = doc_lengths.tolist()
    if isinstance(doc_lengths, (str, bytes)) or not isinstance(doc_lengths, Sequence):
        raise TypeError(f"doc_lengths must be a sequence of integers, got {type(doc_lengths).__name__}")
    if len(doc_lengths) == 0:
        raise ValueError("doc_lengths must name at least one document, got []")
    return [check_int(f"doc_lengths[{j}]", n, minimum=1) for j, n in enumerate(doc_lengths)]


def packed_document_ids(doc_lengths: Sequence[int] | Tensor, *, device: torch.device | str | None = None) -> Tensor:
    """The document of each column of a packed row: ``[0] * len_0 + [1] * len_1 + ...``.

    Shapes:
        doc_lengths: one integer >= 1 per document; returns ``(s,)`` int64 with ``s = sum(doc_lengths)``.
    """
    lengths = _check_lengths(doc_lengths)
    counts = torch.tensor(lengths, device=device)  # (documents,)
    return torch.arange(len(lengths), device=device).repeat_interleave(counts)  # (s,)


def packed_position_ids(doc_lengths: Sequence[int] | Tensor, *, device: torch.device | str | None = None) -> Tensor:
    """Positions that restart at 0 in each packed document: ``[0, ..., len_0 - 1, 0, ..., len_1 - 1, ...]``.

    Equals the ``position_ids`` of transformers' ``DataCollatorWithFlattening`` (default
    ``position_ids_start=0``).

    Shapes:
        doc_lengths: one integer >= 1 per document; returns ``(s,)`` int64 with ``s = sum(doc_lengths)``.
    """
    lengths = _check_lengths(doc_lengths)
    starts = torch.tensor([0, *lengths[:-1]], device=device).cumsum(0)  # (documents,): first column of each
    doc = packed_document_ids(lengths, device=device)  # (s,)
    return torch.arange(sum(lengths), device=device) - starts[doc]  # (s,)


def document_causal_mask(doc_ids: Tensor) -> Tensor:
    """Block-diagonal causal mask: column ``j`` sees column ``l`` iff ``l <= j`` and both hold the same document.

    ``doc_ids`` gives each column's document (:func:`packed_document_ids`); the columns of one
    document must be contiguous, as packing lays them out.

    Shapes:
        doc_ids ``(s,)`` or ``(b, s)`` integers; returns ``(s, s)`` or ``(b, s, s)`` bool (query, key).
    """
    check_integer_tensor("doc_ids", doc_ids)
    if doc_ids.dim() not in (1, 2):
        raise ValueError(f"doc_ids must be (s,) or (b, s), got shape {tuple(doc_ids.shape)}")
    if has_values(doc_ids) and bool((doc_ids.diff(dim=-1) < 0).any()):
        raise ValueError(f"doc_ids must not decrease along a row (documents are contiguous), got {doc_ids.tolist()}")
    s = doc_ids.shape[-1]
    causal = torch.ones(s, s, dtype=torch.bool, device=doc_ids.device).tril()  # (s, s)
    same = doc_ids[..., :, None] == doc_ids[..., None, :]  # (s, s) or (b, s, s)
    return causal & same


def additive_mask(allowed: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """A boolean mask as the term added to the logits: 0 where allowed, ``-inf`` where not.

    Pass it as ``bias`` to :func:`posenc.scaled_dot_product_attention` (add a head axis first).

    Shapes:
        allowed ``(...)`` bool; returns ``(...)`` in ``dtype``.
    """
    check_tensor("allowed", allowed)
    if allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool tensor, got {allowed.dtype}")
    dtype = float_dtype("dtype", dtype)
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


def streaming_cache_indices(seq_len: int, *, cache_size: int, num_sinks: int) -> Tensor:
    """Which of the first ``seq_len`` tokens a StreamingLLM cache holds (arXiv:2309.17453).

    Up to ``cache_size`` tokens everything is kept; past it the cache holds the first ``num_sinks``
    tokens (the attention sinks) and the ``cache_size - num_sinks`` most recent ones. The returned
    indices are the tokens' original positions, in order; StreamingLLM's positions within the cache
    are ``arange(len(indices))``.

    Shapes:
        returns ``(k,)`` int64 with ``k = min(seq_len, cache_size)``.
    """
    seq_len = check_int("seq_len", seq_len, minimum=1)
    cache_size = check_int("cache_size", cache_size, minimum=1)
    num_sinks = check_int("num_sinks", num_sinks, minimum=0)
    if num_sinks >= cache_size:
        raise ValueError(f"num_sinks must be < cache_size = {cache_size} (room for the newest token), got {num_sinks}")
    if seq_len <= cache_size:
        return torch.arange(seq_len)
    recent = cache_size - num_sinks
    return torch.cat((torch.arange(num_sinks), torch.arange(seq_len - recent, seq_len)))  # (cache_size,)
