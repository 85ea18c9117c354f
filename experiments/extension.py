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
  then evaluated at length ``2 L_0``;
* **two more tasks, the same seven methods**: five RoPE models of the same shape and base per task,
  trained as ``experiments/lab.py`` trains its arms of the task: **lag copy** (lag 3, exact offset;
  600 steps at lr 5e-3) and the **passkey** (a 3-digit key after a marker, hidden in filler at a
  depth; 2000 steps at lr 2e-3). Lag copy is read per query position of ``alpha * L_0`` like marker
  recall (dynamic NTK per prefix at :func:`sampled` positions beyond ``L_0``); the passkey at the
  length ``alpha * L_0`` with the key at the depth fractions 0, 1/4, 1/2, 3/4, 1
  (``posenc.tasks.passkey_depths``), each digit's prediction read, for dynamic NTK, from its own
  prefix.

Every model is **rounded to float16 before it is evaluated** (the record's accuracies are those of
the rounded models) and the fine-tuning starts from the rounded base model: re-evaluating a saved
checkpoint reproduces the record up to the CPU's summation order, which can flip a rare argmax.

Usage (from the repository root, with the project's venv; one thread)::

    python experiments/extension.py --record          # train, evaluate, write experiments/extension/
    python experiments/extension.py --record --tasks lag_copy,passkey  # only these; keep the rest
    python experiments/extension.py --rerun           # train marker recall again: rerun.csv, rerun.json
    python experiments/extension.py --check           # re-evaluate every checkpoint against the record
    python experiments/extension.py --compare         # re-run --record into a temporary folder and
                                                      # compare its numbers with the stored record
    python experiments/extension.py --compare --against replication  # the same for --replicate's new
                                                      # seeds, against replication.csv

Outputs in ``experiments/extension/``: ``results.csv`` (one row per stage, method, alpha, seed and
position with a measured accuracy; stage ``base`` is marker recall, ``fine_tuned`` its fine-tuned
models, ``lag_copy`` and ``passkey`` the two other tasks; a passkey row's ``position`` is the key's
depth), ``record.json`` (the config, posenc's version, the git commit, torch's version, the timings,
the final losses, the checkpoints) and ``checkpoints/`` (float16 state dicts of the five base models,
of the three fine-tuned seed-0 models and of seed 0's lag-copy and passkey models, about 0.2 MB
each).

Tolerance (:data:`TOLERANCE`): a re-evaluated checkpoint, or a re-run, matches the record when the
mean accuracy of every band (inside ``L_0``: ``2 <= m < L_0``; beyond it: the measured ``m >= L_0``)
of every stage, method, alpha and seed, and the passkey accuracy at every depth, is within 1
percentage point of the recorded one. A re-run is held to this only for the stages recorded in the
same environment (:func:`reproducible_stages`): training does not reproduce across machines, and
the marker-recall stages did not come back when re-trained here (``--rerun``; chapter 10,
``sec-extension-rerun``). For every stage, ``--compare`` also fails when a verdict of a method
against no scaling changes sides (:func:`reversed_verdicts`).
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
from posenc.tasks import (
    accuracy_per_position,
    lag_copy_batch,
    marker_recall_batch,
    passkey_accuracy,
    passkey_batch,
    passkey_depths,
)

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
    "tasks": {
        "marker_recall": {"min_len": 3},
        # the two other tasks, trained as experiments/lab.py trains them (its CONFIG["tasks"])
        "lag_copy": {"lag": 3, "min_len": 4, "steps": 600, "lr": 5e-3},
        "passkey": {"min_len": 8, "steps": 2000, "lr": 2e-3},
    },
    "other_tasks": ["lag_copy", "passkey"],  # stages of their own, the seven methods at every alpha
    "passkey_depth_fractions": [0.0, 0.25, 0.5, 0.75, 1.0],
    "passkey_key_length": 3,
    "factors": [2, 4, 8],
    "methods": list(METHODS),
    "eval_seed": 1000,
    "eval_batch": 128,
    "fine_tune": {"factor": 2, "steps": 150, "batch": 16, "lr": 2e-3, "seed_offset": 100},
    "fine_tune_methods": ["none", "PI", "YaRN"],
    "checkpoint_seeds": {"base": [0, 1, 2, 3, 4], "fine_tuned": [0], "lag_copy": [0], "passkey": [0]},
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


def per_position(config: dict, model: TinyTransformer, length: int, task: str = "marker_recall") -> torch.Tensor:
    """Accuracy at each position of the record's evaluation sequences (one causal pass). ``(length,)``."""
    return accuracy_per_position(
        model,
        length=length,
        vocab_size=config["vocab_size"],
        seed=config["eval_seed"],
        task=task,
        lag=config["tasks"][task].get("lag"),
        batch=config["eval_batch"],
    )


def task_batch(config: dict, task: str, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The evaluation sequences of :func:`per_position` and their targets (``IGNORE_INDEX``: none). ``(b, s)`` each."""
    generator = torch.Generator().manual_seed(config["eval_seed"])  # the sequences of per_position
    batch, vocab = config["eval_batch"], config["vocab_size"]
    if task == "lag_copy":
        tokens, targets, _ = lag_copy_batch(
            generator, batch, length, vocab_size=vocab, lag=config["tasks"][task]["lag"]
        )
    else:
        tokens, targets, _ = marker_recall_batch(generator, batch, length, vocab_size=vocab, marker_at=0)
    return tokens, targets


@torch.no_grad()
def per_position_dynamic(
    config: dict, model: TinyTransformer, length: int, task: str = "marker_recall"
) -> torch.Tensor:
    """As :func:`per_position`, but the prediction at ``m`` comes from the prefix ``0..m`` (dynamic NTK).

    Inside ``L_0`` one pass of length ``L_0`` (dynamic NTK leaves it unchanged); beyond, only the
    positions of :func:`sampled` (NaN elsewhere). Shapes: returns ``(length,)`` float32.
    """
    L0 = config["train_len"]
    first = config["tasks"][task].get("lag", 2)  # the first position with a target (marker recall: 2)
    tokens, targets = task_batch(config, task, length)
    result = torch.full((length,), math.nan)
    hits = model(tokens[:, :L0]).argmax(-1) == targets[:, :L0]  # (b, L_0)
    result[first:L0] = hits[:, first:].float().mean(0)
    for m in sampled(config, length // L0):
        last = model(tokens[:, : m + 1])[:, -1].argmax(-1)  # (b,)
        result[m] = (last == targets[:, m]).float().mean()
    return result


def passkey_depths_of(config: dict, length: int) -> list[int]:
    """The key's positions for the record's depth fractions (``posenc.tasks.passkey_depths``)."""
    return passkey_depths(length, config["passkey_depth_fractions"], key_length=config["passkey_key_length"])


@torch.no_grad()
def passkey_dynamic(config: dict, model: TinyTransformer, length: int, per_digit: bool = False) -> torch.Tensor:
    """As ``posenc.tasks.passkey_accuracy``, each digit predicted from its own prefix (dynamic NTK).

    The same sequences (a fresh generator from ``eval_seed`` per depth); the ``k`` digits are asked
    at ``q .. q + k - 1`` with ``q = length - k - 1``: one pass of each prefix ``0..q + j``.
    Returns ``(depths,)`` float32, or with ``per_digit`` each digit's share apart, ``(depths, k)``
    (``experiments/passkey_digits.py``).
    """
    k = config["passkey_key_length"]
    query = length - k - 1
    result = []
    for depth in passkey_depths_of(config, length):
        generator = torch.Generator().manual_seed(config["eval_seed"])
        tokens, targets, _ = passkey_batch(
            generator, config["eval_batch"], length, vocab_size=config["vocab_size"], key_length=k, depth=depth
        )
        hits = [
            model(tokens[:, : query + j + 1])[:, -1].argmax(-1) == targets[:, query + j] for j in range(k)
        ]  # k x (b,)
        hits = torch.stack(hits).float()  # (k, b)
        result.append(hits.mean(1) if per_digit else hits.mean())
    return torch.stack(result)


def passkey_scores(
    config: dict, scaled: TinyTransformer, method: str, length: int, per_digit: bool = False
) -> torch.Tensor:
    """The passkey at ``length``, the key at each of the record's depths, read by ``scaled`` (a model
    already extended by ``method``): ``(depths,)``, or with ``per_digit`` each digit apart, ``(depths, k)``.
    Dynamic NTK reads each digit from its own prefix (:func:`passkey_dynamic`)."""
    if method == "dynamic NTK":
        return passkey_dynamic(config, scaled, length, per_digit=per_digit)
    return passkey_accuracy(
        scaled,
        length=length,
        depths=passkey_depths_of(config, length),
        vocab_size=config["vocab_size"],
        seed=config["eval_seed"],
        key_length=config["passkey_key_length"],
        batch=config["eval_batch"],
        per_digit=per_digit,
    )


def evaluate(
    config: dict, model: TinyTransformer, method: str, alpha: int, task: str = "marker_recall"
) -> torch.Tensor:
    """``model`` extended by ``method`` to ``alpha * L_0``, read on ``task``.

    Marker recall and lag copy: accuracy per position, ``(alpha * L_0,)`` (NaN where not measured);
    the passkey: a tensor of ``alpha * L_0`` NaNs holding the accuracy at each depth's position.
    """
    scaled = extended(config, model, method, alpha)
    length = alpha * config["train_len"]
    if task == "passkey":
        result = torch.full((length,), math.nan)
        result[passkey_depths_of(config, length)] = passkey_scores(config, scaled, method, length)
        return result
    if method == "dynamic NTK":
        return per_position_dynamic(config, scaled, length, task)
    return per_position(config, scaled, length, task)


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
    if stage == "fine_tuned":
        return f"fine_tuned-{method.replace(' ', '_')}-seed{seed}.pt"
    return f"{stage}-seed{seed}.pt"  # base (marker recall), lag_copy, passkey


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


def environment() -> dict:
    """Where a run trains (:func:`lab.environment <experiments.lab.environment>`): versions, the
    CPU's model and the instruction set torch's kernels use.

    The marker-recall stages of the stored record predate this field; re-training them here (with
    their own commit's code too) does not give their models back, so that part of the record cannot
    be regenerated.
    """
    return load_lab().environment()


def check_kept_config(old: dict, new: dict) -> None:
    """Raise if ``new`` changes a setting of ``old`` (a record whose stages are kept); new keys may be added."""
    for key, value in old.items():
        if isinstance(value, dict) and isinstance(new.get(key), dict):
            check_kept_config(value, new[key])
        elif new.get(key) != value:
            raise ValueError(f"the stored record's config has {key}={value!r}, CONFIG has {new.get(key)!r}")


def stages_of(task: str) -> tuple[str, ...]:
    """The stages of ``results.csv`` that one task's run writes (marker recall: base and fine-tuned)."""
    return ("base", "fine_tuned") if task == "marker_recall" else (task,)


def record(config: dict, out: Path, tasks: list[str] | None = None) -> None:
    """Train, evaluate and fine-tune; write ``results.csv``, ``record.json`` and checkpoints.

    ``tasks``: all (``None``: marker recall, with its fine-tuning, then :data:`CONFIG`'s
    ``other_tasks``) or some of them; then the stages of the other tasks are kept from the record
    already in ``out`` (rows, losses, timings, checkpoints), and ``record.json`` lists each run
    (``runs``: its tasks, git commit, versions and seconds). Every task trains from its own seeds,
    so a task's rows do not depend on which others run with it.
    """
    every = ["marker_recall", *config["other_tasks"]]
    tasks = every if tasks is None else tasks
    if not tasks or any(task not in every for task in tasks):
        raise ValueError(f"tasks must be some of {every}, got {tasks!r}")
    lab = load_lab()
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows, losses, timings, checkpoints = [], {}, {}, {}
    runs = []
    written = {stage for task in tasks for stage in stages_of(task)}
    if set(tasks) != set(every) and (out / "record.json").exists():  # keep the other tasks' stages
        old = json.loads((out / "record.json").read_text())
        check_kept_config(old["config"], config)  # the kept stages were made with these settings
        with open(out / "results.csv", newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if row["stage"] not in written]

        def kept(table: dict) -> dict:
            return {k: v for k, v in table.items() if k.split("/")[0] not in written}

        losses, timings, checkpoints = kept(old["final_loss"]), kept(old["timings"]), kept(old["checkpoints"])
        earlier = old.get("runs") or [
            {key: old[key] for key in ("posenc_version", "git_commit", "torch_version", "total_seconds")}
            | {"tasks": ["marker_recall"]}
        ]
        for run in earlier:
            left = [task for task in run["tasks"] if task not in tasks]
            if left:
                runs.append({**run, "tasks": left})

    def save(stage: str, method: str, seed: int, model: TinyTransformer) -> None:
        path = out / "checkpoints" / checkpoint_name(stage, method, seed)
        records.save_checkpoint(model, path)
        checkpoints[f"{stage}/{method}/{seed}"] = {"path": str(path.relative_to(out)), "bytes": path.stat().st_size}

    def train_stage(task: str, stage: str) -> dict[int, TinyTransformer]:
        """Train one model per seed on ``task``, round it, evaluate every method at every alpha."""
        models = {}
        for seed in config["seeds"]:
            tick = time.perf_counter()
            model = make_model(config, seed)
            loss = lab.train_on_task(model, config, task, seed)
            models[seed] = model = records.round_to_checkpoint(model).eval()
            trained = time.perf_counter() - tick
            for alpha in config["factors"]:
                for method in config["methods"]:
                    rows.extend(rows_of(stage, method, alpha, seed, evaluate(config, model, method, alpha, task)))
            losses[f"{stage}/{seed}"] = round(float(loss[-50:].mean()), 6)
            timings[f"{stage}/{seed}"] = {
                "train_s": round(trained, 1),
                "eval_s": round(time.perf_counter() - tick - trained, 1),
            }
            if seed in config["checkpoint_seeds"][stage]:
                save(stage, "none", seed, model)
            print(
                f"[{time.perf_counter() - started:6.0f} s] {stage} seed {seed}: loss {losses[f'{stage}/{seed}']:.3f}",
                flush=True,
            )
        return models

    bases = train_stage("marker_recall", "base") if "marker_recall" in tasks else {}
    factor = config["fine_tune"]["factor"]
    for method in config["fine_tune_methods"] if "marker_recall" in tasks else ():
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
    for task in [task for task in config["other_tasks"] if task in tasks]:
        train_stage(task, task)
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    runs.append(
        {
            "tasks": list(tasks),
            "git_commit": lab.git_commit(),
            **environment(),
            "total_seconds": round(time.perf_counter() - started, 1),
        }
    )
    meta = {
        "config": config,
        "posenc_version": posenc.__version__,
        "git_commit": lab.git_commit(),
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": 1,
        "tolerance": TOLERANCE,
        "runs": runs,  # the latest last; together they wrote every stage
        "total_seconds": round(sum(run["total_seconds"] for run in runs), 1),
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
    The passkey (stage ``passkey``) has no bands: each depth is its own entry, ``"depth p"``.
    """
    L0 = config["train_len"]
    out = {}
    for key, curve in curves.items():
        if isinstance(curve, torch.Tensor):
            curve = {m: float(a) for m, a in enumerate(curve.tolist()) if not math.isnan(a)}
        if key[0] == "passkey":
            out.update({(*key, f"depth {p}"): a for p, a in curve.items()})
            continue
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
        if stage != "fine_tuned":  # marker recall (base), lag copy, the passkey
            model = load_checkpoint(config, path)
            task = "marker_recall" if stage == "base" else stage
            for alpha in config["factors"]:
                for m in config["methods"]:
                    now[stage, m, alpha, seed] = evaluate(config, model, m, alpha, task)
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


def reproducible_stages(meta: dict, env: dict) -> set[str]:
    """The stages of a record whose run trained in ``env`` (same CPU, instruction set, torch, Python).

    Only these can be expected to come back number for number from a re-run: training elsewhere
    sums in another order (:func:`environment`). A run without these fields (the marker-recall run
    of the stored record) matches nothing.
    """
    return {
        stage
        for run in meta.get("runs", [])
        if load_lab().same_machine(run, env)
        for task in run["tasks"]
        for stage in stages_of(task)
    }


def reversed_verdicts(config: dict, recorded: dict, new: dict) -> list[str]:
    """Verdicts that change sides between two sets of band means (:func:`band_means`), one line each.

    Each method against no scaling, per stage, alpha and band of :func:`band_means` (not exactly
    the chapter's bands: "beyond" is every measured position, the passkey each depth), paired over
    the seeds (t, 95 %): a comparison whose winner is one arm in ``recorded`` and the other in
    ``new``. A move between a winner and "indistinguishable" is not a reversal (chapter 10,
    ``sec-extension-rerun``). A band mean missing from either side is reported too.
    """
    from posenc import paired_comparison

    lines = []
    groups = {(stage, m, alpha, band) for stage, m, alpha, _, band in recorded if m != "none"}
    for stage, method, alpha, band in sorted(groups, key=str):
        winners = []
        for name, table in (("record", recorded), ("re-run", new)):
            keys = [(stage, m, alpha, s, band) for m in (method, "none") for s in config["seeds"]]
            if missing := [k for k in keys if k not in table]:
                lines.append(f"{missing[0]}: missing from the {name}")
                break
            arms = [[table[(stage, m, alpha, s, band)] for s in config["seeds"]] for m in (method, "none")]
            winners.append(paired_comparison(*arms, names=(method, "none")).winner)
        if len(winners) == 2 and None not in winners and winners[0] != winners[1]:
            lines.append(
                f"{stage}, {method} vs none, alpha {alpha}, {band}: {winners[0]} better in the record,"
                f" {winners[1]} better in the re-run"
            )
    return lines


#: a re-run's model without scaling, inside the training length, may move this much from the record
#: even where training does not reproduce (it is near 100 % in every seed; a broken run is not)
FLOOR_TOLERANCE = 0.05


def broken_training(recorded: dict, new: dict) -> list[str]:
    """The unscaled models' inside-``L_0`` band means (marker recall, lag copy) that moved more than
    :data:`FLOOR_TOLERANCE`: a check a re-run that trains badly fails, on any machine."""
    lines = []
    for key, value in sorted(recorded.items(), key=str):
        stage, method, _, _, band = key
        if stage in ("base", "lag_copy") and method == "none" and band == "inside":
            now = new.get(key, math.nan)
            if not abs(now - value) <= FLOOR_TOLERANCE:
                lines.append(f"{key}: recorded {value:.4f}, now {now:.4f} (no scaling inside L_0)")
    return lines


def compare(config: dict, out: Path = OUT, tolerance: float = TOLERANCE) -> int:
    """Re-run :func:`record` into a temporary folder and compare it with the stored record.

    The stages recorded in this environment (:func:`reproducible_stages`) must come back: every band
    mean within ``tolerance``. For all stages, no verdict of a method against no scaling may change
    sides (:func:`reversed_verdicts`), and the unscaled models must still work inside the training
    length (:func:`broken_training`). Returns 1 when any fails.
    """
    lab = load_lab()
    meta = json.loads((out / "record.json").read_text())
    exact = reproducible_stages(meta, environment())
    recorded = band_means(config, load_results(out / "results.csv"))
    with tempfile.TemporaryDirectory() as scratch:
        record(config, Path(scratch))
        new = band_means(config, load_results(Path(scratch) / "results.csv"))
    problems = lab.compare_numbers(
        {k: v for k, v in recorded.items() if k[0] in exact}, {k: v for k, v in new.items() if k[0] in exact}, tolerance
    )
    reversals = reversed_verdicts(config, recorded, new)
    broken = broken_training(recorded, new)
    for line in problems + reversals + broken:
        print(line)
    elsewhere = sorted({k[0] for k in recorded} - exact)
    if not exact:
        print("NOTE: no stage was recorded in this environment; no band mean is compared number for number")
    print(
        f"stages recorded here {sorted(exact)}: {len(problems)} band means beyond {tolerance:.1%};"
        f" recorded elsewhere {elsewhere}: band means not compared (training does not reproduce across"
        f" machines); verdicts against no scaling that changed sides or are missing: {len(reversals)};"
        f" unscaled models off inside L_0: {len(broken)}"
    )
    return 1 if problems or reversals or broken else 0


RERUN_FIELDS = ("stage", "method", "alpha", "seed", "band", "accuracy")


def read_rerun_bands(path: Path) -> dict[tuple, float]:
    """A ``rerun.csv`` or ``replication.csv`` as ``{(stage, method, alpha, seed, band): mean}``, the
    keys of :func:`band_means` (its bands are :func:`rerun_bands`'s)."""
    with open(path, newline="") as handle:
        return {
            (r["stage"], r["method"], int(r["alpha"]), int(r["seed"]), r["band"]): float(r["accuracy"])
            for r in csv.DictReader(handle)
        }


def compare_replication(config: dict, out: Path = OUT, tolerance: float = TOLERANCE) -> int:
    """``--compare --against replication``: train the replication again (:func:`replication_config`,
    every task) into a temporary folder and compare its band means (:func:`rerun_bands`) with
    ``replication.csv``, by :func:`compare`'s three rules: number for number within ``tolerance``
    only if ``replication.json`` was written in this environment; on any machine, no verdict of a
    method against no scaling may change sides, and the unscaled models must still work inside the
    training length. Returns 1 when any fails.
    """
    lab = load_lab()
    config = replication_config(config)
    meta = json.loads((out / "replication.json").read_text())
    exact = lab.same_machine(meta, environment())
    recorded = read_rerun_bands(out / "replication.csv")
    with tempfile.TemporaryDirectory() as scratch:
        record(config, Path(scratch), ["marker_recall", *config["other_tasks"]])
        new = {
            (r["stage"], r["method"], r["alpha"], r["seed"], r["band"]): float(r["accuracy"])
            for r in rerun_bands(config, load_results(Path(scratch) / "results.csv"))
        }
    problems = lab.compare_numbers(recorded, new, tolerance) if exact else []
    reversals = reversed_verdicts(config, recorded, new)
    broken = broken_training(recorded, new)
    for line in problems + reversals + broken:
        print(line)
    print(
        f"replication.json written in this environment: {exact}; {len(problems)} band means beyond"
        f" {tolerance:.1%}{'' if exact else ' (not compared)'}; verdicts against no scaling that changed"
        f" sides or are missing: {len(reversals)}; unscaled models off inside L_0: {len(broken)};"
        f" largest change of a band mean {lab.largest_change(recorded, new):.4f}"
    )
    return 1 if problems or reversals or broken else 0


def rerun_bands(config: dict, curves: dict) -> list[dict]:
    """The band means chapter 10 compares, one row per curve and band, for ``rerun.csv``.

    ``inside``: the measured ``m < L_0`` (marker recall from 2, lag copy from its lag); ``beyond``:
    the :func:`sampled` positions (the chapter's table and verdicts without fine-tuning);
    ``beyond_all``: every measured ``m >= L_0``; the passkey: ``depths``, the mean over its depths.
    ``curves`` maps ``(stage, method, alpha, seed)`` to ``{position: accuracy}``.
    """
    means = band_means(config, curves)  # inside, and beyond: every measured m >= L_0
    rows = []
    for key, curve in sorted(curves.items()):
        if key[0] == "passkey":  # the mean over the depths, as chapter 10 compares it
            mean = sum(curve.values()) / len(curve)
            rows.append(dict(zip(RERUN_FIELDS, (*key, "depths", repr(mean)), strict=True)))
            continue
        at = [curve[m] for m in sampled(config, key[2])]
        bands = {"inside": means[(*key, "inside")], "beyond": sum(at) / len(at), "beyond_all": means[(*key, "beyond")]}
        for band, mean in bands.items():
            rows.append(dict(zip(RERUN_FIELDS, (*key, band, repr(mean)), strict=True)))
    return rows


def replication_config(config: dict) -> dict:
    """``config`` with the lab's new seeds (``lab.REPLICATION_SEEDS``) and no checkpoints; the
    fine-tuning seeds follow them (``seed_offset`` + seed)."""
    seeds = load_lab().REPLICATION_SEEDS
    return {**config, "seeds": seeds, "checkpoint_seeds": {key: [] for key in config["checkpoint_seeds"]}}


def rerun(config: dict, out: Path = OUT, tasks: list[str] | None = None, name: str = "rerun") -> None:
    """Train ``tasks`` again from scratch (default: marker recall, base and fine-tuned models); write
    their band means to ``{name}.csv`` and where and how it ran to ``{name}.json``.

    The record's checkpoints re-evaluate to the record's numbers, but training them again need not
    give the same weights (:func:`environment`). ``rerun`` is the same experiment with the same
    seeds, trained again; ``replication`` (``--replicate``: :func:`replication_config`, every task)
    the same experiment with new seeds. Chapter 10 asks which of its verdicts survive each.
    """
    lab = load_lab()
    started = time.perf_counter()
    tasks = tasks or ["marker_recall"]
    with tempfile.TemporaryDirectory() as scratch:
        record(config, Path(scratch), tasks)
        curves = load_results(Path(scratch) / "results.csv")
        meta = json.loads((Path(scratch) / "record.json").read_text())
    with open(out / f"{name}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RERUN_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rerun_bands(config, curves))
    recorded = json.loads((out / "record.json").read_text())
    info = {
        "config": config,
        "git_commit": lab.git_commit(),
        **environment(),
        "threads": 1,
        "total_seconds": round(time.perf_counter() - started, 1),
        "final_loss": meta["final_loss"],
        "recorded_final_loss": {k: v for k, v in recorded["final_loss"].items() if k in meta["final_loss"]},
    }
    (out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"re-ran {', '.join(tasks)} in {info['total_seconds']:.0f} s; band means in {out / f'{name}.csv'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true", help="train everything and write experiments/extension/")
    parser.add_argument(
        "--tasks",
        help="--record: only these tasks (comma-separated: marker_recall, lag_copy, passkey); the others' stages"
        " are kept from the stored record",
    )
    action.add_argument("--check", action="store_true", help="re-evaluate the saved checkpoints against the record")
    action.add_argument("--compare", action="store_true", help="re-run the record in a temporary folder; compare")
    action.add_argument(
        "--rerun", action="store_true", help="train marker recall again; write its band means to rerun.csv"
    )
    action.add_argument(
        "--replicate",
        action="store_true",
        help="train every task on new seeds (REPLICATION_SEEDS); write band means to replication.csv",
    )
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help="--compare: largest band-mean change")
    parser.add_argument(
        "--against",
        choices=("record", "replication"),
        default="record",
        help="--compare: the record (results.csv) or the replication's new seeds (replication.csv)",
    )
    args = parser.parse_args(argv)
    if args.tasks and not args.record:
        parser.error("--tasks goes with --record")
    if args.record:
        record(CONFIG, OUT, args.tasks.split(",") if args.tasks else None)
        return 0
    if args.compare:
        if args.against == "replication":
            return compare_replication(CONFIG, OUT, args.tolerance)
        return compare(CONFIG, OUT, args.tolerance)
    if args.against != "record":
        parser.error("--against goes with --compare")
    if args.rerun:
        rerun(CONFIG, OUT)
        return 0
    if args.replicate:
        every = ["marker_recall", *CONFIG["other_tasks"]]
        rerun(replication_config(CONFIG), OUT, every, name="replication")
        return 0
    return 1 if check(CONFIG) else 0


if __name__ == "__main__":
    sys.exit(main())
