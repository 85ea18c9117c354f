"""Chapter 10's recorded experiment: RoPE context extension on a small model, five paired seeds.

``book/10_extension.ipynb`` used to train its five RoPE models (1000 steps each) and fine-tune fifteen
more inside the notebook: about 15 minutes of a loaded CPU core on every run. This script does that
training once, as the notebook's settings say (:data:`CONFIG`), and writes the record that the
notebook reads:

* **base models**: marker recall (``posenc.tasks.marker_recall_batch``), RoPE with base 100,
  dim 64, 4 heads, 2 layers, 1000 steps of batch 32 at lr 2e-3, lengths 3..``L_0`` (32), one model
  per seed 0..4 (the seed fixes the initial weights and the batches);
* **evaluation without fine-tuning**: each model with each of the seven methods of
  :data:`METHODS` at ``alpha`` in 2, 4, 8, per query position ``m`` of ``alpha * L_0``, on the same
  128 sequences (``eval_seed`` 1000, the marker at position 0). Dynamic NTK is read per prefix, as
  generation without a cache does (:func:`per_position_dynamic`): every position inside ``L_0``
  from one pass of length ``L_0``, and beyond it every ``2 alpha``-th position only (``sampled``);
* **fine-tuning**: the base model of each seed with no scaling, PI and YaRN at ``alpha = 2``, 150 more
  steps of batch 16 at lr 2e-3 on sequences of length ``2 L_0``, batches drawn from seed ``100 + s``;
  then evaluated at length ``2 L_0``.

Every model is **rounded to float16 before it is evaluated** (the record's accuracies are those of
the rounded models) and the fine-tuning starts from the rounded base model: re-evaluating a saved
checkpoint reproduces the record up to the CPU's summation order, which can flip a rare argmax.

Usage (from the repository root, with the project's venv; one thread)::

    python experiments/extension.py --record          # train, evaluate, write experiments/extension/
    python experiments/extension.py --check           # re-evaluate every checkpoint against the record
    python experiments/extension.py --compare         # re-run --record into a temporary folder and
                                                      # compare its numbers with the stored record

Outputs in ``experiments/extension/``: ``results.csv`` (one row per stage, method, alpha, seed and
position with a measured accuracy), ``record.json`` (the config, posenc's version, the git commit,
torch's version, the timings, the final losses, the checkpoints) and ``checkpoints/`` (float16 state
dicts of the five base models and of the three fine-tuned seed-0 models, about 0.2 MB each).

Tolerance (:data:`TOLERANCE`): a re-evaluated checkpoint, or a re-run, matches the record when the
mean accuracy of every band (inside ``L_0``: ``2 <= m < L_0``; beyond it: the measured ``m >= L_0``)
of every stage, method, alpha and seed is within 1 percentage point of the recorded one.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

import posenc
from posenc import EXTENSION_METHODS, TinyTransformer, extension_settings, records, with_rope_scaling
from posenc.tasks import accuracy_per_position, marker_recall_batch

HERE = Path(__file__).resolve().parent
OUT = HERE / "extension"
CSV_FIELDS = ("stage", "method", "alpha", "seed", "position", "accuracy")
#: a band mean may move this much (a fraction: 1 percentage point) and still match the record
TOLERANCE = 0.01

METHODS = EXTENSION_METHODS

CONFIG = {
    "vocab_size": 16,  # token 0 is the marker, 1..15 the values
    "train_len": 32,  # L_0
    "dim": 64,
    "num_heads": 4,
    "num_layers": 2,
    "base": 100.0,
    "steps": 1000,
    "batch": 32,
    "lr": 2e-3,
    "seeds": [0, 1, 2, 3, 4],
    "tasks": {"marker_recall": {"min_len": 3}},
    "factors": [2, 4, 8],
    "methods": list(METHODS),
    "eval_seed": 1000,
    "eval_batch": 128,
    "fine_tune": {"factor": 2, "steps": 150, "batch": 16, "lr": 2e-3, "seed_offset": 100},
    "fine_tune_methods": ["none", "PI", "YaRN"],
    "checkpoint_seeds": {"base": [0, 1, 2, 3, 4], "fine_tuned": [0]},
    "checkpoint_dtype": "float16",
}


def load_lab():
    """``experiments/lab.py`` as a module (its :func:`train_on_task` is the one training call)."""
    spec = importlib.util.spec_from_file_location("experiments_lab", HERE / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    return lab


def make_model(config: dict, seed: int) -> TinyTransformer:
    return TinyTransformer(
        config["vocab_size"],
        position="rope",
        position_options={"base": config["base"]},
        dim=config["dim"],
        num_heads=config["num_heads"],
        num_layers=config["num_layers"],
        seed=seed,
        device="cpu",
    )


def extension(config: dict, method: str, alpha: float) -> tuple[dict | None, float]:
    """``(rope_scaling dict, base)`` of ``method`` for a context of ``alpha * L_0`` (as chapter 10)."""
    head_dim = config["dim"] // config["num_heads"]
    return extension_settings(
        method, alpha, base=config["base"], head_dim=head_dim, original_max_position_embeddings=config["train_len"]
    )


def extended(config: dict, model: TinyTransformer, method: str, alpha: float) -> TinyTransformer:
    scaling, base = extension(config, method, alpha)
    return with_rope_scaling(model, scaling, base=base)


def sampled(config: dict, alpha: int) -> list[int]:
    """The positions beyond ``L_0`` where dynamic NTK is read: every ``2 alpha``-th from ``L_0 - 1 + 2 alpha``."""
    L0 = config["train_len"]
    return list(range(L0 - 1 + 2 * alpha, alpha * L0, 2 * alpha))


def per_position(config: dict, model: TinyTransformer, length: int) -> torch.Tensor:
    """Accuracy at each position of the record's evaluation sequences (one causal pass). ``(length,)``."""
    return accuracy_per_position(
        model,
        length=length,
        vocab_size=config["vocab_size"],
        seed=config["eval_seed"],
        task="marker_recall",
        batch=config["eval_batch"],
    )


@torch.no_grad()
def per_position_dynamic(config: dict, model: TinyTransformer, length: int) -> torch.Tensor:
    """As :func:`per_position`, but the prediction at ``m`` comes from the prefix ``0..m`` (dynamic NTK).

    Inside ``L_0`` one pass of length ``L_0`` (dynamic NTK leaves it unchanged); beyond, only the
    positions of :func:`sampled` (NaN elsewhere). Shapes: returns ``(length,)`` float32.
    """
    L0 = config["train_len"]
    generator = torch.Generator().manual_seed(config["eval_seed"])  # the sequences of per_position
    tokens, targets, _ = marker_recall_batch(
        generator, config["eval_batch"], length, vocab_size=config["vocab_size"], marker_at=0
    )
    result = torch.full((length,), math.nan)
    hits = model(tokens[:, :L0]).argmax(-1) == targets[:, :L0]  # (b, L_0)
    result[2:L0] = hits[:, 2:].float().mean(0)
    for m in sampled(config, length // L0):
        last = model(tokens[:, : m + 1])[:, -1].argmax(-1)  # (b,)
        result[m] = (last == targets[:, m]).float().mean()
    return result


def evaluate(config: dict, model: TinyTransformer, method: str, alpha: int) -> torch.Tensor:
    """``model`` extended by ``method`` to ``alpha * L_0``: accuracy per position, ``(alpha * L_0,)``."""
    scaled = extended(config, model, method, alpha)
    length = alpha * config["train_len"]
    if method == "dynamic NTK":
        return per_position_dynamic(config, scaled, length)
    return per_position(config, scaled, length)


def fine_tune(config: dict, base: TinyTransformer, method: str, seed: int, lab) -> tuple[TinyTransformer, float]:
    """A copy of ``base`` extended by ``method`` and trained at ``factor * L_0``; rounded, in eval mode."""
    ft = config["fine_tune"]
    length = ft["factor"] * config["train_len"]
    model = extended(config, base, method, ft["factor"]).train()
    losses = lab.train_on_task(
        model,
        config,
        "marker_recall",
        ft["seed_offset"] + seed,
        steps=ft["steps"],
        batch=ft["batch"],
        lr=ft["lr"],
        min_len=length,
        max_len=length,
    )
    return records.round_to_checkpoint(model).eval(), float(losses[-50:].mean())


def checkpoint_name(stage: str, method: str, seed: int) -> str:
    return f"base-seed{seed}.pt" if stage == "base" else f"fine_tuned-{method.replace(' ', '_')}-seed{seed}.pt"


def load_checkpoint(config: dict, path: Path, method: str | None = None) -> TinyTransformer:
    """A saved model in float32 and eval mode; ``method``: a fine-tuned model, extended as it was tuned."""
    model = make_model(config, 0)
    if method is not None:
        model = extended(config, model, method, config["fine_tune"]["factor"])
    return records.load_checkpoint(model, path)


def rows_of(stage: str, method: str, alpha: int, seed: int, accuracy: torch.Tensor) -> list[dict]:
    """CSV rows of one accuracy curve: the measured positions only (an accuracy is a count / 128: exact)."""
    return [
        {"stage": stage, "method": method, "alpha": alpha, "seed": seed, "position": m, "accuracy": repr(float(a))}
        for m, a in enumerate(accuracy.tolist())
        if not math.isnan(a)
    ]


def record(config: dict, out: Path) -> None:
    """Train, evaluate and fine-tune everything; write ``results.csv``, ``record.json`` and checkpoints."""
    lab = load_lab()
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows, losses, timings, checkpoints = [], {}, {}, {}

    def save(stage: str, method: str, seed: int, model: TinyTransformer) -> None:
        path = out / "checkpoints" / checkpoint_name(stage, method, seed)
        records.save_checkpoint(model, path)
        checkpoints[f"{stage}/{method}/{seed}"] = {"path": str(path.relative_to(out)), "bytes": path.stat().st_size}

    bases = {}
    for seed in config["seeds"]:
        tick = time.perf_counter()
        model = make_model(config, seed)
        loss = lab.train_on_task(model, config, "marker_recall", seed)
        bases[seed] = records.round_to_checkpoint(model).eval()
        trained = time.perf_counter() - tick
        for alpha in config["factors"]:
            for method in config["methods"]:
                rows += rows_of("base", method, alpha, seed, evaluate(config, bases[seed], method, alpha))
        losses[f"base/{seed}"] = round(float(loss[-50:].mean()), 6)
        timings[f"base/{seed}"] = {
            "train_s": round(trained, 1),
            "eval_s": round(time.perf_counter() - tick - trained, 1),
        }
        if seed in config["checkpoint_seeds"]["base"]:
            save("base", "none", seed, bases[seed])
        print(
            f"[{time.perf_counter() - started:6.0f} s] base seed {seed}: loss {losses[f'base/{seed}']:.3f}", flush=True
        )
    factor = config["fine_tune"]["factor"]
    for method in config["fine_tune_methods"]:
        for seed in config["seeds"]:
            tick = time.perf_counter()
            model, loss = fine_tune(config, bases[seed], method, seed, lab)
            trained = time.perf_counter() - tick
            rows += rows_of(
                "fine_tuned", method, factor, seed, per_position(config, model, factor * config["train_len"])
            )
            losses[f"fine_tuned/{method}/{seed}"] = round(loss, 6)
            timings[f"fine_tuned/{method}/{seed}"] = {
                "train_s": round(trained, 1),
                "eval_s": round(time.perf_counter() - tick - trained, 1),
            }
            if seed in config["checkpoint_seeds"]["fine_tuned"]:
                save("fine_tuned", method, seed, model)
            print(
                f"[{time.perf_counter() - started:6.0f} s] fine-tuned {method} seed {seed}: loss {loss:.3f}", flush=True
            )
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    meta = {
        "config": config,
        "posenc_version": posenc.__version__,
        "git_commit": lab.git_commit(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": 1,
        "tolerance": TOLERANCE,
        "total_seconds": round(time.perf_counter() - started, 1),
        "final_loss": losses,
        "timings": timings,
        "checkpoints": checkpoints,
        "checkpoint_bytes": sum(c["bytes"] for c in checkpoints.values()),
    }
    (out / "record.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"recorded {len(rows)} rows in {meta['total_seconds']:.0f} s;"
        f" checkpoints {meta['checkpoint_bytes'] / 1e6:.2f} MB"
    )


def load_results(path: Path) -> dict[tuple[str, str, int, int], dict[int, float]]:
    """``results.csv`` as ``{(stage, method, alpha, seed): {position: accuracy}}``."""
    out = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            key = row["stage"], row["method"], int(row["alpha"]), int(row["seed"])
            out.setdefault(key, {})[int(row["position"])] = float(row["accuracy"])
    return out


def band_means(config: dict, curves: dict) -> dict[tuple, float]:
    """Mean accuracy per band of each curve: ``(stage, method, alpha, seed, "inside"|"beyond") -> mean``.

    Inside: the positions ``m < L_0`` (``m >= 2``); beyond: the measured positions ``m >= L_0``.
    ``curves`` maps ``(stage, method, alpha, seed)`` to ``{position: accuracy}`` or to a tensor.
    """
    L0 = config["train_len"]
    out = {}
    for key, curve in curves.items():
        if isinstance(curve, torch.Tensor):
            curve = {m: float(a) for m, a in enumerate(curve.tolist()) if not math.isnan(a)}
        for band, keep in (("inside", lambda m: m < L0), ("beyond", lambda m: m >= L0)):
            values = [a for m, a in curve.items() if keep(m)]
            out[(*key, band)] = sum(values) / len(values) if values else math.nan
    return out


def check(config: dict, out: Path = OUT) -> int:
    """Re-evaluate every saved checkpoint; compare its band means with the record's. Returns failures."""
    lab = load_lab()
    torch.set_num_threads(1)
    meta = json.loads((out / "record.json").read_text())
    if meta["config"] != config:
        print("record.json's config differs from CONFIG in this script")
        return 1
    recorded = band_means(config, load_results(out / "results.csv"))
    failures = 0
    for key, saved in meta["checkpoints"].items():
        stage, method, seed = key.split("/")
        seed = int(seed)
        path = out / saved["path"]
        now = {}
        if stage == "base":
            model = load_checkpoint(config, path)
            for alpha in config["factors"]:
                for m in config["methods"]:
                    now[stage, m, alpha, seed] = evaluate(config, model, m, alpha)
        else:
            factor = config["fine_tune"]["factor"]
            model = load_checkpoint(config, path, method)
            now[stage, method, factor, seed] = per_position(config, model, factor * config["train_len"])
        now = band_means(config, now)
        problems = lab.compare_numbers({k: recorded.get(k, math.nan) for k in now}, now, TOLERANCE)
        failures += bool(problems)
        worst = max(abs(now[k] - recorded[k]) for k in now if k in recorded)
        print(f"{key:28s} {'ok' if not problems else 'DIFFERS'} (largest band difference {worst:.2%})")
        for line in problems:
            print("   ", line)
    return failures


def compare(config: dict, out: Path = OUT, tolerance: float = TOLERANCE) -> int:
    """Re-run :func:`record` into a temporary folder; compare every band mean with the stored record."""
    lab = load_lab()
    recorded = band_means(config, load_results(out / "results.csv"))
    with tempfile.TemporaryDirectory() as scratch:
        record(config, Path(scratch))
        new = band_means(config, load_results(Path(scratch) / "results.csv"))
    problems = lab.compare_numbers(recorded, new, tolerance)
    for line in problems:
        print(line)
    print(f"{len(recorded)} band means compared, {len(problems)} beyond {tolerance:.1%}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true", help="train everything and write experiments/extension/")
    action.add_argument("--check", action="store_true", help="re-evaluate the saved checkpoints against the record")
    action.add_argument("--compare", action="store_true", help="re-run the record in a temporary folder; compare")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help="--compare: largest band-mean change")
    args = parser.parse_args(argv)
    if args.record:
        record(CONFIG, OUT)
        return 0
    if args.compare:
        return compare(CONFIG, OUT, args.tolerance)
    return 1 if check(CONFIG) else 0


if __name__ == "__main__":
    sys.exit(main())
