"""The lab's passkey, digit by digit: the first digit apart from the two that follow it.

The record (``experiments/lab/results.csv``) scores a passkey model by the share of the key's three
digits it gets right. Only the first is pure content retrieval at a distance: the model answers it at
the query token and must fetch it from the marker's place. Each later digit is answered right after
the model was shown the previous one, so it can also be found by that digit. This script trains the
record's passkey arm again (``lab.fit``: every scheme, seeds 0-4, ``CONFIG`` unchanged) and scores
each model per digit (:func:`posenc.tasks.passkey_accuracy` with ``per_digit=True``) on the record's
evaluation sequences.

Fixed before these models were trained (issue 20): the same 52 paired verdicts as chapter 9's passkey
section (its 28 scheme pairs by length on each seed's mean over the five depths, and its 24 "nearest
against farthest key" comparisons), computed on the first digit instead of the three; the chapter
reports how many keep their winner and names each that does not. Nothing is left out. The mean over
the three digits of each model is compared with the record's number for the same scheme, seed, length
and depth: on the record's machine and code the passkey re-trains number for number (chapter 9's
re-run), so this shows the models are the record's; the largest difference is printed and kept.

The re-run's machine ran torch's kernels with AVX2 (``rerun.json``). On a CPU with AVX-512 the same
code trains other models (measured on two schemes, none and t5: the mean of the digits then differs
from the record by up to 9 points); run it there with ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
ONEDNN_MAX_CPU_ISA=AVX2`` in the environment, as the kept record was. The merge writes
``passkey_digits.json``: the environment it runs in (:func:`lab.environment`, which names the kernels'
instruction set; run it as the parts were trained) and the largest difference.

Chapter 10 (``--extension``): the same for the extension experiment's passkey stage
(``experiments/extension.py``: RoPE with base 100, seeds 0-4, trained as the lab trains the passkey,
rounded to float16, each of its seven methods at alpha 2, 4 and 8 with the key at five depths; dynamic
NTK read per prefix), scored on the record's evaluation sequences. Fixed before these models were
trained: chapter 10's 18 passkey verdicts (each method against no scaling at each alpha, on each
seed's mean over the five depths, a paired 95 % t interval) computed on the first digit instead of
the three; the chapter reports how many keep their winner and names each that does not. The mean of
the three digits is compared with ``experiments/extension/results.csv`` the same way (its passkey
stage was recorded with AVX2 kernels on an AMD EPYC: ``record.json``'s ``runs``).

Usage: ``python experiments/passkey_digits.py SCHEME [SCHEME ...]`` writes one part per scheme to
``_build/passkey_digits/<scheme>.csv`` (scratch, not kept: run two processes on two cores, each with
some of the schemes); ``--merge`` joins the parts into ``experiments/lab/passkey_digits.csv``.
``--extension SEED [SEED ...]`` writes ``_build/passkey_digits/extension-seed<s>.csv``;
``--merge-extension`` joins them into ``experiments/extension/passkey_digits.csv`` (and ``.json``).
``--compare --extension`` trains the extension's models again and compares their digits with the kept
file (:func:`compare_extension`; the weekly workflow runs it). The lab's digits are compared by
``lab.py --compare --arm passkey SCHEME``, which trains the same models.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

from posenc import records

OUT = Path(__file__).with_name("lab")
EXTENSION_OUT = Path(__file__).with_name("extension")
EXTENSION_FIELDS = ("method", "alpha", "seed", "depth", "digit", "accuracy", "n")
PARTS = Path(__file__).resolve().parents[1] / "_build" / "passkey_digits"
FIELDS = ("scheme", "seed", "eval_length", "depth", "digit", "accuracy", "n")


def load_script(name: str):
    """A sibling script (``lab.py``, ``extension.py``) as a module."""
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, rows: list[dict], fields: tuple[str, ...] = FIELDS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def recorded(lab) -> dict[tuple, float]:
    """The record's passkey numbers: (scheme, seed, length, depth) -> accuracy over the three digits."""
    found = {}
    with open(OUT / "results.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["task"] == "passkey" and row["accuracy"]:
                key = row["scheme"], int(row["seed"]), int(row["eval_length"]), int(row["lo"])
                found[key] = float(row["accuracy"])
    return found


#: the fields that name a place of the record (the lab's, the extension's), in the record's key order
LAB_PLACE = ("scheme", "seed", "eval_length", "depth")
EXTENSION_PLACE = ("method", "alpha", "seed", "depth")


def largest_gap(rows: list[dict], record: dict[tuple, float], place: tuple[str, ...] = LAB_PLACE) -> float:
    """The largest |mean over the digits - the record's number| over the rows' places (``place``:
    the fields of a row that make the record's key; a name field stays a string)."""
    means: dict[tuple, list[float]] = {}
    for row in rows:
        key = tuple(row[f] if f in ("scheme", "method") else int(row[f]) for f in place)
        means.setdefault(key, []).append(float(row["accuracy"]))
    return max(abs(sum(v) / len(v) - record[key]) for key, v in means.items())


def train(schemes: list[str]) -> None:
    lab = load_script("lab")
    torch.set_num_threads(1)
    config, record = lab.CONFIG, recorded(lab)
    for scheme in schemes:
        if scheme not in config["schemes"]:
            raise SystemExit(f"error: {scheme!r} is not a scheme of the lab ({config['schemes']})")
        start, rows = time.perf_counter(), []
        for seed in config["seeds"]:
            model, _ = lab.fit(config, scheme, "passkey", seed)
            rows += lab.digit_rows(config, model, scheme, seed)
        write(PARTS / f"{scheme}.csv", rows)
        print(
            f"{scheme}: {len(config['seeds'])} models, {time.perf_counter() - start:.0f} s;"
            f" largest |mean of the digits - record| {largest_gap(rows, record):.4f}",
            flush=True,
        )


def merge_parts(parts: list[str], out: Path, fields: tuple[str, ...], record: dict, place: tuple[str, ...]) -> None:
    """Join ``PARTS/<part>.csv`` into ``out/passkey_digits.csv``; write ``passkey_digits.json`` (the
    environment this runs in, the commit, the rows, the largest gap from ``record``)."""
    lab = load_script("lab")
    rows = []
    for part in parts:
        with open(PARTS / f"{part}.csv", newline="") as handle:
            rows += list(csv.DictReader(handle))
    write(out / "passkey_digits.csv", rows, fields)
    gap = largest_gap(rows, record, place)
    meta = {"environment": lab.environment(), "git_commit": lab.git_commit(), "rows": len(rows), "largest_gap": gap}
    (out / "passkey_digits.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{len(rows)} rows; largest |mean of the digits - record| {gap:.4f}")


def merge() -> None:
    lab = load_script("lab")
    merge_parts(lab.CONFIG["schemes"], OUT, FIELDS, recorded(lab), LAB_PLACE)


def extension_digit_rows(ext, lab, seed: int) -> list[dict]:
    """One extension passkey model trained as ``extension.py`` trains it; one row per method, alpha,
    depth and digit (dynamic NTK: each digit from its own prefix, as the record reads it)."""
    config = ext.CONFIG
    model = ext.make_model(config, seed)
    lab.train_on_task(model, config, "passkey", seed)
    model = records.round_to_checkpoint(model).eval()
    return extension_model_rows(ext, model, seed)


def extension_model_rows(ext, model, seed: int, factors=None) -> list[dict]:
    """The rows of one (float16-rounded) extension passkey model at ``factors`` (default: all)."""
    config, lab = ext.CONFIG, load_script("lab")
    rows = []
    for alpha in factors or config["factors"]:
        length = alpha * config["train_len"]
        depths = ext.passkey_depths_of(config, length)
        for method in config["methods"]:
            scaled = ext.extended(config, model, method, alpha)
            accuracy = ext.passkey_scores(config, scaled, method, length, per_digit=True)  # (depths, k)
            rows += lab.digit_row_dicts(depths, accuracy, config["eval_batch"], method=method, alpha=alpha, seed=seed)
    return rows


def extension_recorded(ext) -> dict[tuple, float]:
    """The extension record's passkey numbers: (method, alpha, seed, depth) -> accuracy of the three digits."""
    found = {}
    for (stage, method, alpha, seed), curve in ext.load_results(EXTENSION_OUT / "results.csv").items():
        if stage == "passkey":
            for depth, accuracy in curve.items():
                found[method, alpha, seed, depth] = accuracy
    return found


def train_extension(seeds: list[int]) -> None:
    ext, lab = load_script("extension"), load_script("lab")
    torch.set_num_threads(1)
    record = extension_recorded(ext)
    for seed in seeds:
        if seed not in ext.CONFIG["seeds"]:
            raise SystemExit(f"error: {seed} is not a seed of the extension experiment ({ext.CONFIG['seeds']})")
        start = time.perf_counter()
        rows = extension_digit_rows(ext, lab, seed)
        write(PARTS / f"extension-seed{seed}.csv", rows, EXTENSION_FIELDS)
        print(
            f"extension seed {seed}: {time.perf_counter() - start:.0f} s;"
            f" largest |mean of the digits - record| {largest_gap(rows, record, EXTENSION_PLACE):.4f}",
            flush=True,
        )


def merge_extension() -> None:
    ext = load_script("extension")
    parts = [f"extension-seed{seed}" for seed in ext.CONFIG["seeds"]]
    merge_parts(parts, EXTENSION_OUT, EXTENSION_FIELDS, extension_recorded(ext), EXTENSION_PLACE)


def extension_first_digits(rows: list[dict]) -> dict[tuple, float]:
    """The first digit of extension rows, keyed as ``extension.band_means`` keys the passkey
    (``("passkey", method, alpha, seed, "depth p")``), and its mean over the depths (band ``depths``,
    as chapter 10 compares it)."""
    out: dict[tuple, float] = {}
    for row in rows:
        if int(row["digit"]) == 0:
            key = ("passkey", row["method"], int(row["alpha"]), int(row["seed"]))
            out[(*key, f"depth {row['depth']}")] = float(row["accuracy"])
    for key in {k[:4] for k in list(out)}:
        depths = [v for k, v in out.items() if k[:4] == key]
        out[(*key, "depths")] = sum(depths) / len(depths)
    return out


def compare_extension_rows(ext, kept: list[dict], new: list[dict], exact: bool, tolerance: float) -> list[str]:
    """What a re-run ``new`` changes in the kept extension digits, one line each: on any machine, a
    verdict of a method against no scaling on the first digit (per alpha, at each depth and on the
    mean over the depths: a wider family than chapter 10's 18) that changes sides; with ``exact``
    (the kept file was written in this environment), every first digit beyond ``tolerance``."""
    lab = load_script("lab")
    before, after = extension_first_digits(kept), extension_first_digits(new)
    problems = lab.compare_numbers(before, after, tolerance) if exact else []
    return problems + ext.reversed_verdicts(ext.CONFIG, before, after)


def compare_extension() -> int:
    """``--compare --extension``: train the extension's passkey models again (seeds 0-4; nothing is
    written) and compare their digits with ``experiments/extension/passkey_digits.csv``. The lab's
    digits are compared by ``lab.py --compare --arm passkey SCHEME``, which trains those models anyway."""
    ext, lab = load_script("extension"), load_script("lab")
    torch.set_num_threads(1)
    with open(EXTENSION_OUT / "passkey_digits.csv", newline="") as handle:
        kept = list(csv.DictReader(handle))
    meta = json.loads((EXTENSION_OUT / "passkey_digits.json").read_text())
    exact = lab.same_machine(meta["environment"], lab.environment())
    new = [row for seed in ext.CONFIG["seeds"] for row in extension_digit_rows(ext, lab, seed)]
    problems = compare_extension_rows(ext, kept, new, exact, lab.TOLERANCE)
    for line in problems:
        print(line)
    moved = lab.largest_change(extension_first_digits(kept), extension_first_digits(new))
    print(
        f"kept in this environment: {exact}; largest change of a first digit {moved:.4f};"
        f" problems (verdicts that changed sides{', numbers beyond 1 point' if exact else ''}): {len(problems)}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--compare", "--extension"]:
        sys.exit(compare_extension())
    if sys.argv[1:] == ["--merge"]:
        merge()
    elif sys.argv[1:] == ["--merge-extension"]:
        merge_extension()
    elif sys.argv[1:2] == ["--extension"] and sys.argv[2:]:
        train_extension([int(seed) for seed in sys.argv[2:]])
    elif sys.argv[1:]:
        train(sys.argv[1:])
    else:
        raise SystemExit(__doc__)
