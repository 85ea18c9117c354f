"""A real-text corpus shipped with posenc, and byte-level language modelling on it.

Book: the real-text chapter (``book/13_real_text.ipynb``). The text is a fixed slice of CPython
3.11.7's standard library source (top-level ``Lib/*.py``), under the PSF License Agreement; the
licence ships beside it (``posenc/data/CPYTHON_LICENSE.txt``) and ``posenc/data/manifest.json``
lists every file, its size and SHA-256, and the selection rule (``tools/make_corpus.py`` in the
book's repository rebuilds it byte for byte). :func:`corpus_info` returns that manifest.

Two fixed splits: ``"train"`` (112 files, about 2.0 MB) and ``"validation"`` (16 other files,
about 0.4 MB). The model reads bytes: the vocabulary is the 256 byte values (:data:`VOCAB_SIZE`),
so no tokenizer is involved. The next-byte loss is measured in nats; perplexity is its
exponential, as the ALiBi paper (arXiv:2108.12409) reports it for WikiText-103 tokens.

Evaluation as in the ALiBi paper's Figure 1: for an evaluation length ``L``, the first
``num_bytes + 1`` bytes of the validation split are cut into non-overlapping windows: window ``i``
reads bytes ``i L .. (i+1) L`` (its ``L`` inputs, and as targets the ``L`` bytes after each). Every
length scores the same ``num_bytes`` bytes once each (``num_bytes`` must be a multiple of ``L``),
and each window starts from an empty context.

Shapes:
    b: batch (windows), s: sequence length.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import math
from functools import cache
from importlib import resources

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._checks import check_int

__all__ = [
    "SPLITS",
    "VOCAB_SIZE",
    "corpus_info",
    "evaluation_windows",
    "load_split",
    "loss_per_position",
    "perplexity",
    "split_tensor",
    "text_batch",
]

SPLITS = ("train", "validation")
#: one token per byte value
VOCAB_SIZE = 256


def _check_split(split: object) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


@cache
def corpus_info() -> dict:
    """The corpus's manifest: source, release, licence, selection rule, and per split its files,
    byte count and SHA-256 (a fresh copy is not made: do not modify the returned dict)."""
    return json.loads(resources.files("posenc").joinpath("data", "manifest.json").read_text())


@cache
def load_split(split: str) -> bytes:
    """The bytes of one split (``"train"`` or ``"validation"``), checked against the manifest's SHA-256."""
    split = _check_split(split)
    packed = resources.files("posenc").joinpath("data", f"cpython_{split}.txt.gz").read_bytes()
    data = gzip.decompress(packed)
    expected = corpus_info()["splits"][split]["sha256"]
    if hashlib.sha256(data).hexdigest() != expected:
        raise RuntimeError(f"posenc's {split} corpus does not match its manifest (SHA-256): reinstall posenc")
    return data


@cache
def split_tensor(split: str) -> Tensor:
    """One split as a 1-D int64 tensor of byte values in ``[0, 256)`` on the CPU. ``(n_bytes,)``

    Shared between calls: do not modify it in place.
    """
    return torch.frombuffer(bytearray(load_split(split)), dtype=torch.uint8).long()  # (n,)


def text_batch(
    generator: torch.Generator,
    batch: int,
    length: int,
    *,
    split: str = "train",
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``batch`` windows of ``length`` bytes at random offsets of ``split``, for next-byte prediction.

    The offsets are drawn from ``generator`` (one ``torch.randint`` call, uniform over every start
    that leaves room for the next byte). Returns ``tokens``, ``targets`` (each token's next byte)
    and ``mask`` (all True: every position has a target), the triple of :mod:`posenc.tasks`.

    Shapes:
        returns three ``(b, s)`` tensors: int64, int64, bool.
    """
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    batch = check_int("batch", batch, minimum=1)
    data = split_tensor(_check_split(split))
    length = check_int("length", length, minimum=1, maximum=len(data) - 1)
    starts = torch.randint(0, len(data) - length, (batch,), generator=generator, device=generator.device)
    index = starts.cpu()[:, None] + torch.arange(length + 1)  # (b, s + 1)
    windows = data[index].to(device)  # (b, s + 1)
    tokens, targets = windows[:, :-1], windows[:, 1:]  # (b, s), (b, s)
    return tokens, targets, torch.ones_like(tokens, dtype=torch.bool)


def evaluation_windows(length: int, *, num_bytes: int, split: str = "validation") -> tuple[Tensor, Tensor]:
    """The first ``num_bytes`` scored bytes of ``split`` as non-overlapping windows of ``length``.

    Window ``i`` has the inputs ``data[i L : (i+1) L]`` and the targets ``data[i L + 1 : (i+1) L + 1]``;
    ``num_bytes`` must be a multiple of ``length``, so every length scores the same bytes.

    Shapes:
        returns tokens and targets, ``(num_bytes / length, length)`` int64 each.
    """
    data = split_tensor(_check_split(split))
    length = check_int("length", length, minimum=1)
    num_bytes = check_int("num_bytes", num_bytes, minimum=length, maximum=len(data) - 1)
    if num_bytes % length:
        raise ValueError(f"num_bytes must be a multiple of length = {length}, got {num_bytes}")
    tokens = data[:num_bytes].view(-1, length)  # (n, s)
    targets = data[1 : num_bytes + 1].view(-1, length)  # (n, s)
    return tokens, targets


@torch.no_grad()
def loss_per_position(
    model: nn.Module, length: int, *, num_bytes: int, split: str = "validation", batch: int = 16
) -> Tensor:
    """Mean next-byte loss (nats) at each position of :func:`evaluation_windows`, ``batch`` windows per pass.

    ``model`` maps tokens ``(b, s)`` to logits ``(b, s, 256)``; it runs on its own device, in the
    mode it is in (call ``.eval()`` first). Position ``m`` of a window has seen ``m + 1`` bytes.

    Shapes:
        returns ``(length,)`` float64 on the CPU.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    batch = check_int("batch", batch, minimum=1)
    tokens, targets = evaluation_windows(length, num_bytes=num_bytes, split=split)
    # the model's device: that of its first parameter or buffer (a model with neither runs on the CPU)
    device = next(itertools.chain(model.parameters(), model.buffers()), torch.empty(0)).device
    total = torch.zeros(tokens.shape[1], dtype=torch.float64)  # (s,)
    for start in range(0, len(tokens), batch):
        logits = model(tokens[start : start + batch].to(device))  # (b, s, 256)
        if logits.shape[-1] != VOCAB_SIZE:
            raise ValueError(f"model must return logits over {VOCAB_SIZE} bytes, got {tuple(logits.shape)}")
        nll = F.cross_entropy(
            logits.float().transpose(1, 2), targets[start : start + batch].to(device), reduction="none"
        )  # (b, s)
        total += nll.double().sum(0).cpu()
    return total / len(tokens)  # (s,)


def perplexity(model: nn.Module, length: int, *, num_bytes: int, split: str = "validation", batch: int = 16) -> float:
    """``exp`` of the mean next-byte loss over every scored byte of :func:`evaluation_windows` (ALiBi's Figure 1)."""
    return math.exp(float(loss_per_position(model, length, num_bytes=num_bytes, split=split, batch=batch).mean()))
