"""Predict where the lab's RoPE lag-copy model fails, from its weights, by a rule fixed in advance.

Rule (fixed before looking at the accuracy; issue 20): in the first layer, take the head that puts the
most attention on the key ``lag`` places back inside ``L_0``; decompose its logit at that distance
into RoPE pairs (:func:`posenc.analysis.rope_pair_logits`, over every query token and key token of the
vocabulary); the carrying pairs are the fewest that hold 90 % of the mean absolute contribution
(:func:`posenc.analysis.carrying_pairs`, ``share = 0.9``); the predicted failure is the first distance
past ``lag`` where every carrying pair is back within 30 degrees of its angle at ``lag``
(:func:`posenc.analysis.alias_distance`, ``tol = pi / 6``). Observed: the first query position whose
accuracy (seed-0 checkpoint, the record's evaluation sequences) falls below one half, and the distance
the first-layer lag head looks at from the last query.

Usage: ``python experiments/aliasing.py`` (needs ``experiments/lab/checkpoints/lag_copy-rope-seed0.pt``).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch

from posenc.analysis import alias_distance, carrying_pairs, rope_pair_logits
from posenc.tasks import accuracy_per_position, lag_copy_batch

SHARE, TOL = 0.9, math.pi / 6  # the rule's two constants, fixed in advance


def main() -> None:
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("experiments_lab", Path(__file__).with_name("lab.py"))
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    config = lab.CONFIG
    lag, L0, vocab = config["tasks"]["lag_copy"]["lag"], config["train_len"], config["vocab_size"]
    longest = lab.bands(config)[-1][1]
    model = lab.load_checkpoint(config, "lag_copy", "rope", 0)
    rotary = model.scheme.rotary
    heads, d = model.num_heads, model.dim // model.num_heads

    # the lag head: most first-layer attention on the key `lag` back, at queries m in [lag, L_0)
    probe, _, _ = lag_copy_batch(torch.Generator().manual_seed(config["eval_seed"]), 64, L0, vocab_size=vocab, lag=lag)
    weights = model.attention_weights(probe)[0].mean(0)  # (h, s, s)
    on_lag = weights.diagonal(-lag, dim1=-2, dim2=-1)[:, : L0 - lag].mean(-1)  # (h,)
    head = int(on_lag.argmax())

    # unrotated queries and keys of every token in the first layer (no position enters before RoPE)
    with torch.no_grad():
        block = model.blocks[0]
        x = block.norm1(model.tokens.weight)  # (v, c)
        q, k, _ = block.qkv(x).view(vocab, 3, heads, d).unbind(1)  # 3 x (v, h, d)
    q, k = q[:, head].double(), k[:, head].double()  # (v, d)
    inv_freq = rotary.inv_freq.double()
    parts = rope_pair_logits(q[:, None], k[None, :], -lag, inv_freq, pairing=rotary.pairing)  # (v, v, p)
    size = parts.abs().mean((0, 1))  # (p,)
    pairs = carrying_pairs(size, SHARE)
    predicted = alias_distance(inv_freq, pairs, trained=lag, max_distance=longest, tol=TOL)

    accuracy = accuracy_per_position(
        model, length=longest, vocab_size=vocab, seed=config["eval_seed"], lag=lag, batch=config["eval_batch"]
    )
    below = (accuracy[lag:] < 0.5).nonzero()
    fall = int(below[0]) + lag if len(below) else None
    tokens, _, _ = lag_copy_batch(
        torch.Generator().manual_seed(config["eval_seed"]), 64, longest, vocab_size=vocab, lag=lag
    )
    last_row = model.attention_weights(tokens)[0, :, head].mean(0)[-1]  # (s,) the last query
    looked_at = longest - 1 - int(last_row.argmax())

    print(f"lag head: layer 1 head {head + 1} ({on_lag[head]:.0%} of its attention on the key {lag} back inside L_0)")
    print("mean |c_i| per pair at distance", lag, ":", [round(v, 3) for v in size.tolist()])
    print(f"carrying pairs ({SHARE:.0%}): {pairs.tolist()}; predicted alias distance (tol 30 deg): {predicted}")
    print(f"observed: accuracy first below 1/2 at m = {fall}; last query looks {looked_at} back")


if __name__ == "__main__":
    main()
