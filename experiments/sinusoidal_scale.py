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
and load (``train_s`` in the CSV). ``--compare`` trains the kept file's scales and seeds again and
fails when chapter 9's reading of it changes (:func:`compare_rows`); the weekly workflow runs it.
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


def train_rows(lab, scales: list[float], seeds: list[int], device: str = "cpu") -> list[dict]:
    """The rows of ``sinusoidal_scale.csv``: each scale and seed trained and evaluated as the record."""
    config = lab.CONFIG
    rows = []
    for scale in scales:
        for seed in seeds:
            tick = time.perf_counter()
            model = TinyTransformer(
                config["vocab_size"],
                position="sinusoidal",
                dim=config["dim"],
                num_heads=config["num_heads"],
                num_layers=config["num_layers"],
                seed=seed,
                device=device,
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
                        "device": torch.device(device).type,
                        "train_s": f"{seconds:.1f}",
                    }
                )
            print(f"scale {scale:4g} seed {seed}: loss {loss:.3f} ({seconds:.0f} s)", flush=True)
    return rows


#: a model has learned marker recall when its final loss is below this (chapter 9: every seed at
#: scale 50 ends below it; the record's control stays at ln 15 = 2.7)
LEARNED_LOSS = 0.2


def conclusions(lab, rows: list[dict]) -> tuple[dict, dict]:
    """What chapter 9 reads from the rows: per scale, the seeds that learned (final loss below
    :data:`LEARNED_LOSS`), and per scale and band the paired verdict (95 % t over the seeds) of the
    scaled model against the record's (``results.csv``: the sinusoidal marker-recall arm, scale 1)."""
    from posenc import paired_comparison

    control = lab.load_results()
    learned, verdicts = {}, {}
    for scale in sorted({float(r["token_scale"]) for r in rows}):
        mine = [r for r in rows if float(r["token_scale"]) == scale]
        learned[scale] = sorted({int(r["seed"]) for r in mine if float(r["final_loss"]) < LEARNED_LOSS})
        for lo in sorted({int(r["lo"]) for r in mine}):
            at = sorted((int(r["seed"]), float(r["accuracy"])) for r in mine if int(r["lo"]) == lo)
            record = [control["marker_recall", "sinusoidal", lo, seed][1] for seed, _ in at]
            verdicts[scale, lo] = paired_comparison(
                [a for _, a in at], record, names=(f"tokens x {scale:g}", "record")
            ).winner
    return learned, verdicts


def compare_rows(lab, kept: list[dict], new: list[dict]) -> list[str]:
    """What a re-run ``new`` changes in chapter 9's reading of the kept rows, one line each: a
    verdict against the record that changes sides (a move to or from "indistinguishable" is not one,
    as in ``lab.py --compare``), or a scale at which every seed learned and one no longer does. The
    numbers themselves are not compared: the kept file does not say where it trained, and training
    does not reproduce across machines (``lab.py``: environment)."""
    seeds_kept, verdicts_kept = conclusions(lab, kept)
    seeds_new, verdicts_new = conclusions(lab, new)
    problems = []
    for key, before in verdicts_kept.items():
        after = verdicts_new.get(key, "missing")
        if after == "missing" or (before and after and before != after):
            problems.append(f"scale {key[0]:g}, band from {key[1]}: {before} better in the kept file, now {after}")
    every = sorted({int(r["seed"]) for r in kept})
    for scale, learned in seeds_kept.items():
        if learned == every and seeds_new.get(scale) != every:
            problems.append(f"scale {scale:g}: every seed learned in the kept file, now only {seeds_new.get(scale)}")
    return problems


def read(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, nargs="+", default=[50.0, 8.0], help="token-embedding factors")
    parser.add_argument("--seeds", type=int, nargs="+", help="default: the record's seeds (0..4)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=HERE / "lab" / "sinusoidal_scale.csv")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="train the kept file's scales and seeds again (written nowhere) and compare with it",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lab = load_lab()
    if args.compare:
        kept = read(args.out)
        scales = sorted({float(r["token_scale"]) for r in kept}, reverse=True)
        new = train_rows(lab, scales, sorted({int(r["seed"]) for r in kept}), args.device)
        problems = compare_rows(lab, kept, new)
        for line in problems:
            print(line)
        moved = max(abs(float(a["accuracy"]) - float(b["accuracy"])) for a, b in zip(kept, new, strict=True))
        print(
            f"largest change of a band: {moved:.4f};"
            f" verdicts that changed sides, seeds that stopped learning: {len(problems)}"
        )
        return 1 if problems else 0
    rows = train_rows(lab, args.scale, args.seeds or lab.CONFIG["seeds"], args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lab.write_rows(args.out, rows, FIELDS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
