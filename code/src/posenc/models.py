"""A tiny decoder-only transformer whose position scheme is one argument, for the book's lab.

Book: chapter 7 (``book/07_lab.ipynb``). Every scheme is built from posenc's own functions:

========================  ==========================================================  =========
``position``              where position enters                                        chapter
========================  ==========================================================  =========
``"none"`` (NoPE)          nowhere: only the causal mask orders the tokens              6
``"sinusoidal"``           added to the input: :func:`posenc.sinusoidal_encoding`       2
``"learned"``              added to the input: :class:`posenc.LearnedPositionalEmbedding`  3
``"shaw"``                 keys and values: :func:`posenc.shaw_attention`               4
``"t5"``                   logits: :class:`posenc.T5RelativeBias` (shared by layers)     4
``"alibi"``                logits: :func:`posenc.alibi_bias`                            6
``"rope"``                 queries and keys rotated: :func:`posenc.apply_rope`          5
========================  ==========================================================  =========

Blocks are pre-norm (LayerNorm, causal attention, residual; LayerNorm, MLP, residual). All
weights are initialised from an explicit seed.

Shapes:
    b: batch, s: sequence length, c: model width (``dim``), h: heads, d: head dim (``c / h``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._checks import check_int, check_tensor
from posenc.alibi import alibi_bias
from posenc.attention import scaled_dot_product_attention
from posenc.learned import LearnedPositionalEmbedding
from posenc.relative import T5RelativeBias, shaw_attention
from posenc.rope import apply_rope
from posenc.sinusoidal import sinusoidal_encoding

__all__ = ["POSITION_SCHEMES", "TinyTransformer", "default_device"]

POSITION_SCHEMES = ("none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope")


def default_device() -> torch.device:
    """A CUDA GPU when one is present (as in Colab), otherwise the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class _Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, position: str, shaw_max_relative: int):
        super().__init__()
        self.num_heads, self.position = num_heads, position
        head_dim = dim // num_heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        if position == "shaw":  # per layer, shared by the heads (Shaw et al.)
            self.rel_k = nn.Parameter(torch.zeros(2 * shaw_max_relative + 1, head_dim))
            self.rel_v = nn.Parameter(torch.zeros(2 * shaw_max_relative + 1, head_dim))

    def attend(self, x: Tensor, bias: Tensor | None) -> Tensor:
        b, s, c = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)  # 3 x (b, h, s, d)
        if self.position == "rope":
            positions = torch.arange(s, device=x.device)
            q, k = apply_rope(q, positions), apply_rope(k, positions)
        if self.position == "shaw":
            out, _ = shaw_attention(q, k, v, self.rel_k, self.rel_v, causal=True)
        else:
            out, _ = scaled_dot_product_attention(q, k, v, bias=bias, causal=True)  # (b, h, s, d)
        return self.proj(out.transpose(1, 2).reshape(b, s, c))  # (b, s, c)

    def forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        x = x + self.attend(self.norm1(x), bias)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """A small causal language model; ``position`` picks one of :data:`POSITION_SCHEMES`.

    ``max_positions`` is the size of the learned table (``position="learned"``) and is used by no
    other scheme: a learned model fed a longer sequence raises the table's ``ValueError``.

    Shapes:
        forward: tokens ``(b, s)`` int64 in ``[0, vocab_size)``; returns logits ``(b, s, vocab_size)``.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        position: str,
        dim: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        max_positions: int = 64,
        shaw_max_relative: int = 16,
        seed: int = 0,
        device: torch.device | str | None = None,
    ):
        super().__init__()
        if position not in POSITION_SCHEMES:
            raise ValueError(f"position must be one of {POSITION_SCHEMES}, got {position!r}")
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=2)
        self.dim = check_int("dim", dim, minimum=2)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        check_int("num_layers", num_layers, minimum=1)
        self.max_positions = check_int("max_positions", max_positions, minimum=1)
        check_int("shaw_max_relative", shaw_max_relative, minimum=1)
        seed = check_int("seed", seed)
        if dim % num_heads:
            raise ValueError(f"dim must be divisible by num_heads, got dim={dim}, num_heads={num_heads}")
        if position == "rope" and (dim // num_heads) % 2:
            raise ValueError(f"rope needs an even head dim, got dim // num_heads = {dim // num_heads}")
        self.position = position

        # PyTorch layers draw their default initialisation from the global generator; fork it so that
        # building a model leaves the caller's random state alone, then initialise from `seed`.
        with torch.random.fork_rng(devices=[]):
            self.tokens = nn.Embedding(vocab_size, dim)
            self.learned = LearnedPositionalEmbedding(max_positions, dim) if position == "learned" else None
            self.t5 = T5RelativeBias(num_heads, bidirectional=False) if position == "t5" else None
            self.blocks = nn.ModuleList(_Block(dim, num_heads, position, shaw_max_relative) for _ in range(num_layers))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab_size)
        self._initialise(torch.Generator().manual_seed(seed))
        self.to(default_device() if device is None else device)

    @torch.no_grad()
    def _initialise(self, generator: torch.Generator) -> None:
        # GPT-2 style: weights N(0, 0.02), biases 0, LayerNorm (1, 0); position tables likewise N(0, 0.02).
        for name, param in self.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)

    def forward(self, tokens: Tensor) -> Tensor:
        check_tensor("tokens", tokens, ndim=2)
        if tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be int64, got {tokens.dtype}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens must be in [0, {self.vocab_size}), got values {int(tokens.min())}..{int(tokens.max())}")
        s = tokens.shape[1]
        positions = torch.arange(s, device=tokens.device)
        x = self.tokens(tokens)  # (b, s, c)
        if self.position == "sinusoidal":
            x = x + sinusoidal_encoding(positions, self.dim, dtype=x.dtype)
        elif self.position == "learned":
            x = x + self.learned(positions)  # raises past max_positions
        bias = None
        if self.position == "t5":
            bias = self.t5(s, s)  # (h, s, s), computed once and shared by every layer, as in T5
        elif self.position == "alibi":
            bias = alibi_bias(self.num_heads, s, s).to(x.device)
        for block in self.blocks:
            x = block(x, bias)
        return self.head(self.norm(x))  # (b, s, vocab)

    def loss(self, tokens: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
        """Mean cross-entropy over the positions where ``mask`` is true. Shapes: all ``(b, s)``."""
        logits = self(tokens)
        return F.cross_entropy(logits[mask], targets[mask])
