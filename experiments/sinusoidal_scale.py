"""Why the lab's sinusoidal model never learns marker recall: a test of the input-scale hypothesis.

In the lab's record (``experiments/lab/``) the sinusoidal model's marker-recall loss stays at
``ln 15`` (chance) in all five seeds. Hypothesis: :class:`posenc.TinyTransformer` initialises the
token embedding with std 0.02 (a token vector's norm is about ``0.02 * sqrt(64) = 0.16``) while the
sinusoidal vector added to it has norm ``sqrt(dim / 2) = 5.7``: after the first LayerNorm the
token's content is a small perturbation of the position, and a task that must find a token by its
content starts on a plateau. (Vaswani et al. multiply the embedding by ``sqrt(d_model)`` before
adding the encoding; posenc does not.)

Test: the record's marker-recall training of the sinusoidal model (lab.py's CONFIG, seeds 0..4,
the same batches), changed in one thing only: the initial token embedding is multiplied by a
``--scale``: 50 (std 1, a token vector's norm about 8, above the encoding's 5.7) and 8, the
``sqrt(d_model)`` of Vaswani et al. (std 0.16, a norm about 1.3). The control arm is the record
itself (scale 1). Evaluated as the record is (:func:`lab.evaluate`, bands
of query positions up to ``8 L_0``). Writes ``experiments/lab/sinusoidal_scale.csv`` beside the
record (chapter 9 reads it): one row per scale, seed and band, with the final loss (mean of the
last 50 steps), the device and the training time.

Usage: ``python experiments/sinusoidal_scale.py [--scale 50 8] [--device cpu] [--out CSV]`` (the
CSV was written with ``--scale 50 8``); 20 s to 4 minutes per seed on one CPU thread, by machine
and load (``train_s`` in the CSV).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import time
from pathlib import Path

import torch

from posenc import TinyTransformer

HERE = Path(__file__).resolve().parent
FIELDS = ("token_scale", "seed", "lo", "hi", "accuracy", "final_loss", "device", "train_s")


def load_lab():
    spec = importlib.util.spec_from_file_location("experiments_lab", HERE / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    return lab


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, nargs="+", default=[50.0, 8.0], help="token-embedding factors")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the record's seeds (0..4)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=HERE / "lab" / "sinusoidal_scale.csv")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lab = load_lab()
    config = lab.CONFIG
    rows = []
    for scale in args.scale:
        for seed in args.seeds or config["seeds"]:
            tick = time.perf_counter()
            model = TinyTransformer(
                config["vocab_size"],
                position="sinusoidal",
                dim=config["dim"],
                num_heads=config["num_heads"],
                num_layers=config["num_layers"],
                seed=seed,
                device=args.device,
            )
            with torch.no_grad():
                model.tokens.weight.mul_(scale)
            losses = lab.train_on_task(model, config, "marker_recall", seed)
            seconds = time.perf_counter() - tick
            loss = float(losses[-50:].mean())
            for row in lab.evaluate(config, model.eval(), "sinusoidal", "marker_recall"):
                rows.append(
                    {
                        "token_scale": scale,
                        "seed": seed,
                        "lo": row["lo"],
                        "hi": row["hi"],
                        "accuracy": f"{row['accuracy']:.6f}",
                        "final_loss": f"{loss:.6f}",
                        "device": torch.device(args.device).type,
                        "train_s": f"{seconds:.1f}",
                    }
                )
            print(f"scale {scale:4g} seed {seed}: loss {loss:.3f} ({seconds:.0f} s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
