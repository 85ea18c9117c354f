"""Chapter 13's recorded experiment: train short, test long on real text (the ALiBi paper in miniature).

Issue 22. Byte-level language models on posenc's real-text corpus (:mod:`posenc.corpus`: a slice of
CPython 3.11.7's standard library, PSF licence), one per position scheme and seed:

* **base models**: the seven lab schemes (NoPE, sinusoidal, learned, Shaw, T5 bias, ALiBi, RoPE),
  dim 64, 4 heads, 2 layers, trained at ``L_0`` = 64 bytes for 1000 steps of batch 32 at lr 2e-3
  (AdamW, no weight decay), seeds 0..4; the seed fixes the initial weights and the batches, so two
  schemes on one seed see the same bytes in the same order (paired seeds);
* **evaluation** as the ALiBi paper's Figure 1 (arXiv:2108.12409): perplexity over the first
  ``eval_bytes`` bytes of the validation split cut into non-overlapping windows of ``L`` for
  ``L = 1, 2, 4, 8, 16 x L_0`` (every length scores the same bytes), and the loss per band of
  positions at ``16 L_0``. The learned table has ``L_0`` rows; past them it is evaluated with its
  table extended by rows that were never trained (drawn as the initialisation draws them,
  :func:`extend_learned`), method ``"untrained rows"``;
* **RoPE scaled at inference**: the RoPE models with PI, NTK-aware, YaRN and Llama 3 scaling for
  ``alpha = L / L_0`` (as chapter 10 builds them: :func:`posenc.extension_settings`);
* **fine-tuning**: each RoPE model with no scaling, PI and YaRN at ``alpha = 2``, 100 more steps of
  batch 16 at lr 1e-3 on windows of ``2 L_0``, batches from seed ``100 + s``; evaluated at ``2 L_0``.

Every model is rounded to float16 before it is evaluated (the record holds the rounded models'
numbers) and fine-tuning starts from the rounded base model, so a saved checkpoint re-evaluates
to the record up to the CPU's summation order.

Usage (from the repository root, with the project's venv; one thread per process)::

    python experiments/real_text.py --record [--jobs 2]   # train, evaluate, write experiments/real_text/
    python experiments/real_text.py --check               # re-evaluate the checkpoints against the record
    python experiments/real_text.py --compare [--jobs 2]  # re-run --record in a temporary folder, compare

Outputs in ``experiments/real_text/``: ``results.csv`` (one row per stage, scheme, method, seed and
evaluation length: mean loss in nats and perplexity), ``bands.csv`` (the loss per band of 16
positions at ``16 L_0``, and at ``2 L_0`` for the fine-tuned models), ``record.json`` (config,
versions, git commit, timings, final training losses, checkpoints) and ``checkpoints/`` (float16
state dicts of the seed-0 model of every scheme and of the seed-0 PI and YaRN fine-tunes).

Tolerances: ``--check`` requires every re-evaluated mean loss within :data:`CHECK_TOLERANCE` nats
of the record. ``--compare`` (a re-run from scratch, e.g. on another CPU, where float summation
order can change a trained model) compares the mean over seeds of every (stage, scheme, method,
length) and requires it within ``max(0.03 nats, 5 %)`` of the record (:func:`compare_means`).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import multiprocessing
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

import posenc
from posenc import TinyTransformer, extension_settings, records, with_rope_scaling
from posenc.corpus import VOCAB_SIZE, loss_per_position
from posenc.learned import LearnedPositionalEmbedding

HERE = Path(__file__).resolve().parent
OUT = HERE / "real_text"
RESULT_FIELDS = ("stage", "scheme", "method", "seed", "eval_length", "loss", "perplexity")
BAND_FIELDS = ("stage", "scheme", "method", "seed", "eval_length", "lo", "hi", "loss")
#: --check: a re-evaluated checkpoint's mean loss may differ from the record by this many nats
CHECK_TOLERANCE = 1e-3
#: --compare: a seed-mean loss may move by max(ABSOLUTE, RELATIVE * loss)
COMPARE_ABSOLUTE, COMPARE_RELATIVE = 0.03, 0.05

SCHEMES = ("none", "sinusoidal", "learned", "shaw", "t5", "alibi", "rope")
SCALINGS = ("PI", "NTK", "YaRN", "Llama 3")

CONFIG = {
    "vocab_size": VOCAB_SIZE,
    "train_len": 64,  # L_0, in bytes
    "dim": 64,
    "num_heads": 4,
    "num_layers": 2,
    "base": 10000.0,  # RoPE's base (and the sinusoid's)
    "steps": 1000,
    "batch": 32,
    "lr": 2e-3,
    "seeds": [0, 1, 2, 3, 4],
    "schemes": list(SCHEMES),
    "position_options": {
        "learned": {"max_positions": 64},
        "shaw": {"max_relative": 16},
        "t5": {"num_buckets": 32, "max_distance": 32},
    },
    "tasks": {"text": {"min_len": 64}},  # every training window is L_0 bytes long
    "eval_multiples": [1, 2, 4, 8, 16],
    "eval_bytes": 32768,
    "eval_batch": 16,
    "band_width": 16,
    "scalings": list(SCALINGS),
    "fine_tune": {"factor": 2, "steps": 100, "batch": 16, "lr": 1e-3, "seed_offset": 100},
    "fine_tune_methods": ["none", "PI", "YaRN"],
    "learned_init_seed_offset": 1000,
    "checkpoint_seeds": {"base": [0], "fine_tuned": [0]},
    "checkpoint_fine_tuned": ["PI", "YaRN"],
    "checkpoint_dtype": "float16",
}


def load_script(name: str):
    """``experiments/<name>.py`` as a module (the lab's one training call, ``train_on_task``)."""
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_model(config: dict, scheme: str, seed: int) -> TinyTransformer:
    options = dict(config["position_options"].get(scheme, {}))
    if scheme in ("rope", "sinusoidal"):
        options["base"] = config["base"]
    return TinyTransformer(
        config["vocab_size"],
        position=scheme,
        position_options=options,
        dim=config["dim"],
        num_heads=config["num_heads"],
        num_layers=config["num_layers"],
        seed=seed,
        device="cpu",
    )


@torch.no_grad()
def extend_learned(config: dict, model: TinyTransformer, rows: int, seed: int) -> TinyTransformer:
    """A copy of a learned-table ``model`` whose table has ``rows`` rows: its trained ones, then
    rows that training never reached, drawn N(0, 0.02^2) from ``learned_init_seed_offset + seed``
    (as :meth:`TinyTransformer.initialise` draws every table) and rounded to float16 like the rest."""
    trained = model.scheme.table.weight  # (L_0, c)
    copy = make_model(config, "learned", seed)
    copy.scheme.table = LearnedPositionalEmbedding(rows, config["dim"])
    generator = torch.Generator().manual_seed(config["learned_init_seed_offset"] + seed)
    fresh = torch.empty(rows - len(trained), config["dim"]).normal_(0.0, 0.02, generator=generator)
    copy.load_state_dict({**model.state_dict(), "scheme.table.weight": torch.cat([trained, fresh.half().float()])})
    return copy.eval()


def scaled(config: dict, model: TinyTransformer, method: str, alpha: float) -> TinyTransformer:
    """A copy of the RoPE ``model`` extended by ``method`` to ``alpha * L_0`` (:func:`posenc.extension_settings`)."""
    scaling, base = extension_settings(
        method,
        alpha,
        base=config["base"],
        head_dim=config["dim"] // config["num_heads"],
        original_max_position_embeddings=config["train_len"],
    )
    return with_rope_scaling(model, scaling, base=base)


def measure(config: dict, model: TinyTransformer, length: int) -> torch.Tensor:
    """Mean loss (nats) at each position of the evaluation windows of ``length``. ``(length,)``"""
    return loss_per_position(model, length, num_bytes=config["eval_bytes"], batch=config["eval_batch"])


def rows_of(config: dict, key: dict, curve: torch.Tensor, *, bands: bool) -> tuple[list[dict], list[dict]]:
    """The results row of one evaluation, and (``bands``) its rows per band of ``band_width`` positions."""
    loss = float(curve.mean())
    result = [{**key, "eval_length": len(curve), "loss": repr(loss), "perplexity": repr(math.exp(loss))}]
    width = config["band_width"]
    band_rows = []
    if bands:
        for lo in range(0, len(curve), width):
            band_rows.append(
                {
                    **key,
                    "eval_length": len(curve),
                    "lo": lo,
                    "hi": lo + width,
                    "loss": repr(float(curve[lo : lo + width].mean())),
                }
            )
    return result, band_rows


def fine_tune(config: dict, base: TinyTransformer, method: str, seed: int, lab) -> tuple[TinyTransformer, float]:
    """A copy of ``base`` extended by ``method`` at ``factor`` and trained on windows of ``factor * L_0``."""
    ft = config["fine_tune"]
    length = ft["factor"] * config["train_len"]
    model = scaled(config, base, method, ft["factor"]).train()
    losses = lab.train_on_task(
        model, config, "text", ft["seed_offset"] + seed,
        steps=ft["steps"], batch=ft["batch"], lr=ft["lr"], min_len=length, max_len=length,
    )  # fmt: skip
    return records.round_to_checkpoint(model).eval(), float(losses[-20:].mean())


def checkpoint_name(stage: str, scheme: str, method: str, seed: int) -> str:
    if stage == "base":
        return f"base-{scheme}-seed{seed}.pt"
    return f"fine_tuned-{method.replace(' ', '_')}-seed{seed}.pt"


def load_checkpoint(config: dict, path: Path, scheme: str, method: str | None = None) -> TinyTransformer:
    """A saved model in float32 and eval mode; ``method``: a RoPE fine-tune, extended as it was tuned."""
    model = make_model(config, scheme, 0)
    if method is not None:
        model = scaled(config, model, method, config["fine_tune"]["factor"])
    return records.load_checkpoint(model, path)


def evaluate_base(config: dict, model: TinyTransformer, scheme: str, seed: int) -> tuple[list, list]:
    """Rows of one trained model: every evaluation length, RoPE's scalings, bands at the longest."""
    L0, longest = config["train_len"], max(config["eval_multiples"])
    results, bands = [], []
    for multiple in config["eval_multiples"]:
        length = multiple * L0
        evaluated, method = model, ""
        if scheme == "learned" and length > config["position_options"]["learned"]["max_positions"]:
            evaluated, method = extend_learned(config, model, length, seed), "untrained rows"
        key = {"stage": "base", "scheme": scheme, "method": method, "seed": seed}
        r, b = rows_of(config, key, measure(config, evaluated, length), bands=multiple == longest)
        results += r
        bands += b
        if scheme == "rope" and multiple > 1:
            for method in config["scalings"]:
                key = {"stage": "scaled", "scheme": scheme, "method": method, "seed": seed}
                curve = measure(config, scaled(config, model, method, multiple), length)
                r, b = rows_of(config, key, curve, bands=multiple == longest)
                results += r
                bands += b
    return results, bands


def run_unit(config: dict, scheme: str, seed: int, out: str) -> dict:
    """Train and evaluate one (scheme, seed); for RoPE also the fine-tunes. Returns rows and metadata."""
    torch.set_num_threads(1)
    lab = load_script("lab")
    out = Path(out)
    tick = time.perf_counter()
    model = make_model(config, scheme, seed)
    losses = lab.train_on_task(model, config, "text", seed)
    model = records.round_to_checkpoint(model).eval()
    trained = time.perf_counter() - tick
    results, bands = evaluate_base(config, model, scheme, seed)
    meta = {"final_loss": {f"base/{scheme}/{seed}": round(float(losses[-50:].mean()), 6)}, "checkpoints": {}}
    meta["timings"] = {
        f"base/{scheme}/{seed}": {
            "train_s": round(trained, 1),
            "eval_s": round(time.perf_counter() - tick - trained, 1),
        }
    }

    def save(stage: str, method: str, saved: TinyTransformer) -> None:
        path = out / "checkpoints" / checkpoint_name(stage, scheme, method, seed)
        records.save_checkpoint(saved, path)
        meta["checkpoints"][f"{stage}/{scheme}/{method}/{seed}"] = {
            "path": str(path.relative_to(out)),
            "bytes": path.stat().st_size,
        }

    if seed in config["checkpoint_seeds"]["base"]:
        save("base", "", model)
    if scheme == "rope":
        factor = config["fine_tune"]["factor"]
        for method in config["fine_tune_methods"]:
            tick = time.perf_counter()
            tuned, loss = fine_tune(config, model, method, seed, lab)
            key = {"stage": "fine_tuned", "scheme": scheme, "method": method, "seed": seed}
            r, b = rows_of(config, key, measure(config, tuned, factor * config["train_len"]), bands=True)
            results += r
            bands += b
            meta["final_loss"][f"fine_tuned/{method}/{seed}"] = round(loss, 6)
            meta["timings"][f"fine_tuned/{method}/{seed}"] = {"s": round(time.perf_counter() - tick, 1)}
            if seed in config["checkpoint_seeds"]["fine_tuned"] and method in config["checkpoint_fine_tuned"]:
                save("fine_tuned", method, tuned)
    print(
        f"{scheme:10s} seed {seed}: loss {meta['final_loss'][f'base/{scheme}/{seed}']:.3f}, {trained:.0f} s training",
        flush=True,
    )
    return {"results": results, "bands": bands, **meta}


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def record(config: dict, out: Path, jobs: int = 1) -> None:
    """Train and evaluate every (scheme, seed); write ``results.csv``, ``bands.csv``, ``record.json``."""
    lab = load_script("lab")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    # RoPE's units are the longest (scalings, fine-tunes): start them first
    units = [(s, seed) for s in sorted(config["schemes"], key=lambda s: s != "rope") for seed in config["seeds"]]
    arguments = [(config, scheme, seed, str(out)) for scheme, seed in units]
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            parts = pool.starmap(run_unit, arguments, chunksize=1)
    else:
        parts = [run_unit(*a) for a in arguments]
    order = {
        (s, seed): i for i, (s, seed) in enumerate((s, seed) for s in config["schemes"] for seed in config["seeds"])
    }
    parts = [p for _, p in sorted(zip(units, parts, strict=True), key=lambda x: order[x[0]])]
    results = [r for p in parts for r in p["results"]]
    bands = [b for p in parts for b in p["bands"]]
    write_csv(out / "results.csv", RESULT_FIELDS, results)
    write_csv(out / "bands.csv", BAND_FIELDS, bands)
    checkpoints = {k: v for p in parts for k, v in p["checkpoints"].items()}
    meta = {
        "config": config,
        "posenc_version": posenc.__version__,
        "git_commit": lab.git_commit(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads_per_process": 1,
        "processes": jobs,
        "tolerance": {
            "check": CHECK_TOLERANCE,
            "compare_absolute": COMPARE_ABSOLUTE,
            "compare_relative": COMPARE_RELATIVE,
        },
        "total_seconds": round(time.perf_counter() - started, 1),
        "final_loss": {k: v for p in parts for k, v in p["final_loss"].items()},
        "timings": {k: v for p in parts for k, v in p["timings"].items()},
        "checkpoints": checkpoints,
        "checkpoint_bytes": sum(c["bytes"] for c in checkpoints.values()),
    }
    (out / "record.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"recorded {len(results)} results in {meta['total_seconds']:.0f} s;"
        f" checkpoints {meta['checkpoint_bytes'] / 1e6:.2f} MB"
    )


def load_results(path: Path) -> dict[tuple[str, str, str, int, int], float]:
    """``results.csv`` as ``{(stage, scheme, method, seed, eval_length): mean loss}``."""
    with open(path, newline="") as handle:
        return {
            (r["stage"], r["scheme"], r["method"], int(r["seed"]), int(r["eval_length"])): float(r["loss"])
            for r in csv.DictReader(handle)
        }


def check(config: dict, out: Path = OUT) -> int:
    """Re-evaluate every saved checkpoint at every length it was evaluated at; returns the failures."""
    torch.set_num_threads(1)
    meta = json.loads((out / "record.json").read_text())
    if meta["config"] != config:
        print("record.json's config differs from CONFIG in this script")
        return 1
    recorded = load_results(out / "results.csv")
    failures = 0
    for key, saved in meta["checkpoints"].items():
        stage, scheme, method, seed = key.split("/")
        seed = int(seed)
        now = {}
        if stage == "base":
            model = load_checkpoint(config, out / saved["path"], scheme)
            results, _ = evaluate_base(config, model, scheme, seed)
            now = {(r["stage"], scheme, r["method"], seed, r["eval_length"]): float(r["loss"]) for r in results}
        else:
            model = load_checkpoint(config, out / saved["path"], scheme, method)
            length = config["fine_tune"]["factor"] * config["train_len"]
            now[(stage, scheme, method, seed, length)] = float(measure(config, model, length).mean())
        worst = max(abs(now[k] - recorded[k]) for k in now)
        bad = worst > CHECK_TOLERANCE or set(now) - set(recorded)
        failures += bool(bad)
        print(f"{key:32s} {'DIFFERS' if bad else 'ok'} ({len(now)} losses, largest difference {worst:.1e} nats)")
    return failures


def seed_means(results: dict) -> dict[tuple[str, str, str, int], float]:
    """Mean over seeds of each (stage, scheme, method, eval_length)."""
    groups = {}
    for (stage, scheme, method, _seed, length), loss in results.items():
        groups.setdefault((stage, scheme, method, length), []).append(loss)
    return {key: sum(v) / len(v) for key, v in groups.items()}


def compare_means(recorded: dict, new: dict) -> list[str]:
    """The seed-mean losses of ``new`` that moved beyond ``max(0.03 nats, 5 %)`` of ``recorded`` (or are missing)."""
    problems = []
    for key, old in recorded.items():
        value = new.get(key, math.nan)
        allowed = max(COMPARE_ABSOLUTE, COMPARE_RELATIVE * abs(old))
        if not abs(value - old) <= allowed:
            problems.append(f"{key}: recorded {old:.4f}, now {value:.4f} (allowed {allowed:.3f})")
    return problems


def load_bands(path: Path) -> dict[tuple[str, str, str, int, int], float]:
    """``bands.csv`` keyed as :func:`load_results` keys a loss, with the band's first position folded
    into the length: ``{(stage, scheme, method, seed, (eval_length, lo)): loss}`` (so :func:`seed_means`
    averages each band over the seeds)."""
    with open(path, newline="") as handle:
        return {
            (r["stage"], r["scheme"], r["method"], int(r["seed"]), (int(r["eval_length"]), int(r["lo"]))): float(
                r["loss"]
            )
            for r in csv.DictReader(handle)
        }


def compare(config: dict, out: Path = OUT, jobs: int = 1) -> int:
    """Re-run :func:`record` into a temporary folder; compare every seed-mean loss with the record,
    per evaluation length (``results.csv``) and per band of positions (``bands.csv``)."""
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        record(config, Path(scratch), jobs)
        for name, load in (("results.csv", load_results), ("bands.csv", load_bands)):
            recorded, new = seed_means(load(out / name)), seed_means(load(Path(scratch) / name))
            largest = max(abs(new[k] - recorded[k]) for k in recorded if k in new)
            found = compare_means(recorded, new)
            problems += found
            print(
                f"{name}: {len(recorded)} seed means compared, largest change {largest:.4f} nats,"
                f" {len(found)} beyond tolerance"
            )
    for line in problems:
        print(line)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true", help="train everything and write experiments/real_text/")
    action.add_argument("--check", action="store_true", help="re-evaluate the saved checkpoints against the record")
    action.add_argument("--compare", action="store_true", help="re-run the record in a temporary folder; compare")
    parser.add_argument("--jobs", type=int, default=1, help="processes for --record/--compare (one thread each)")
    args = parser.parse_args(argv)
    if args.record:
        record(CONFIG, OUT, args.jobs)
        return 0
    if args.compare:
        return compare(CONFIG, OUT, args.jobs)
    return 1 if check(CONFIG) else 0


if __name__ == "__main__":
    sys.exit(main())
