"""The weekly workflow's comparisons (.github/workflows/experiments.yml): each script's ``--compare``
passes a re-run that gives back what the repository keeps, and fails one planted change of a
conclusion. No model is trained here: a re-run is stood in for by the kept numbers themselves,
changed where a test plants a change.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
LAB, EXTENSION = EXPERIMENTS / "lab", EXPERIMENTS / "extension"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"weekly_{name}", EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def lab():
    return load_script("lab")


class KeptRun:
    """Stands in for ``lab.record``: writes the arm's kept rows (of ``source``) as its part, each
    passed through ``change(row)``, and hands ``on_model`` each seed with no model."""

    def __init__(self, lab, source: Path, change=lambda row: row):
        self.lab, self.rows, self.change = lab, read(source), change

    def __call__(self, config, task, scheme, out, on_model=None):
        seeds = [str(s) for s in config["seeds"]]
        mine = [self.change(dict(r)) for r in self.rows if (r["task"], r["scheme"]) == (task, scheme)]
        assert sorted({r["seed"] for r in mine}) == seeds
        (out / "parts").mkdir(parents=True, exist_ok=True)
        self.lab.write_rows(self.lab.part_path(task, scheme, "csv", out), mine)
        for seed in config["seeds"]:
            if on_model is not None:
                on_model(seed, None)


def test_a_lab_arm_against_the_replication_passes_the_kept_numbers_and_fails_a_planted_reversal(lab, monkeypatch):
    # in the replication, ALiBi beats RoPE at marker recall in [2 L_0, 8 L_0); plant ALiBi at 1 %
    monkeypatch.setattr(lab, "record", KeptRun(lab, LAB / "replication.csv"))
    assert lab.compare(lab.CONFIG, [("marker_recall", "alibi")], against="replication") == 0

    def collapse(row):
        if row["kind"] == "band" and int(row["lo"]) >= 64:
            row["accuracy"] = f"{0.01 + 0.001 * int(row['seed']):.6f}"
        return row

    monkeypatch.setattr(lab, "record", KeptRun(lab, LAB / "replication.csv", collapse))
    assert lab.compare(lab.CONFIG, [("marker_recall", "alibi")], against="replication") > 0


def test_a_passkey_arm_is_compared_with_the_kept_first_digits_too(lab, monkeypatch, capsys):
    digits = read(LAB / "passkey_digits.csv")

    class Digits:
        """Stands in for passkey_digits.py: a model's rows are the kept ones, changed by ``change``."""

        def __init__(self, change=lambda row: row):
            self.change = change

        def __call__(self, _config, _model, scheme, seed):
            return [self.change(dict(r)) for r in digits if r["scheme"] == scheme and int(r["seed"]) == seed]

    monkeypatch.setattr(lab, "record", KeptRun(lab, LAB / "results.csv"))
    monkeypatch.setattr(lab, "digit_rows", Digits())
    assert lab.compare(lab.CONFIG, [("passkey", "rope")]) == 0
    assert "passkey rope: largest change of a first digit 0.0000" in capsys.readouterr().out

    # plant RoPE's first digit at 100 % at 8 L_0 (its three-digit numbers, results.csv, unchanged): at
    # the first depth the sinusoidal model beats RoPE on the first digit in the kept file
    def perfect(row):
        if int(row["eval_length"]) == 256 and row["digit"] == "0":
            row["accuracy"] = "1.0"
        return row

    monkeypatch.setattr(lab, "digit_rows", Digits(perfect))
    assert lab.compare(lab.CONFIG, [("passkey", "rope")]) > 0
    out = capsys.readouterr().out
    assert (
        "first digit: passkey rope vs sinusoidal ('depth', '0', '252'): sinusoidal better in the record,"
        " rope better after the re-run" in out
    )


def test_the_first_digits_are_keyed_as_the_record_keys_the_passkey(lab):
    first = lab.passkey_first_digits(lab.CONFIG, read(LAB / "passkey_digits.csv"))
    recorded = lab.band_numbers(LAB / "results.csv")
    passkey = {k for k in recorded if k[1] == "passkey" and not math.isnan(recorded[k])}
    assert set(first) == passkey  # every place of the record, and nothing else


def test_the_sinusoidal_scale_comparison_fails_a_seed_that_stops_learning_or_a_reversed_verdict(lab):
    scale = load_script("sinusoidal_scale")
    kept = read(LAB / "sinusoidal_scale.csv")
    assert scale.compare_rows(lab, kept, kept) == []
    learned, verdicts = scale.conclusions(lab, kept)
    assert learned[50.0] == [0, 1, 2, 3, 4] and verdicts[50.0, 128] == "tokens x 50"
    stuck = [dict(r, final_loss="2.7") if (r["token_scale"], r["seed"]) == ("50.0", "2") else r for r in kept]
    assert scale.compare_rows(lab, kept, stuck) == [
        "scale 50: every seed learned in the kept file, now only [0, 1, 3, 4]"
    ]
    # scale 50 at chance in [4 L_0, 8 L_0) on every seed: below the record's control there
    low = [
        dict(r, accuracy=f"{0.001 * int(r['seed']):.6f}") if (r["token_scale"], r["lo"]) == ("50.0", "128") else r
        for r in kept
    ]
    assert scale.compare_rows(lab, kept, low) == [
        "scale 50, band from 128: tokens x 50 better in the kept file, now record"
    ]


def test_the_aliasing_comparisons_fail_a_changed_count_fall_or_verdict():
    aliasing = load_script("aliasing")
    seeds, bases = read(LAB / "aliasing.csv"), read(LAB / "aliasing_bases.csv")
    assert aliasing.compare_rows("seeds", seeds, seeds) == []
    assert aliasing.compare_rows("bases", bases, bases) == []
    assert aliasing.seed_conclusions(seeds) == (8, ["122"])
    missed = [dict(r, fall="121", hit="0") if r["seed"] == "1" else r for r in seeds]
    assert aliasing.compare_rows("seeds", seeds, missed) == [
        "rule B's hits: 8 in the kept file, now 7",
        "the falls: ['122'] in the kept file, now ['121', '122']",
    ]
    # rule B hitting 8 of the 10 models (more than the constant guess): the verdict would change
    assert aliasing.base_verdict(bases)[0] == 4
    better = [dict(r, hit="1") if i < 8 else r for i, r in enumerate(bases)]
    assert aliasing.compare_rows("bases", bases, better) == [
        "supported (fixed in advance): False in the kept file, now True"
    ]


def test_the_extension_digit_comparison_fails_a_reversal_anywhere_and_a_moved_number_where_kept():
    digits, ext = load_script("passkey_digits"), load_script("extension")
    kept = read(EXTENSION / "passkey_digits.csv")
    assert digits.compare_extension_rows(ext, kept, kept, exact=True, tolerance=0.01) == []
    nudged = [dict(r, accuracy=str(float(r["accuracy"]) - 0.02)) if r["method"] == "PI" else r for r in kept]
    assert digits.compare_extension_rows(ext, kept, nudged, exact=False, tolerance=0.01) == []
    assert digits.compare_extension_rows(ext, kept, nudged, exact=True, tolerance=0.01) != []
    # the first digit of YaRN, better than no scaling at alpha 2 in the kept file, at 0 on every seed
    zero = [dict(r, accuracy="0.0") if (r["method"], r["alpha"], r["digit"]) == ("YaRN", "2", "0") else r for r in kept]
    lines = digits.compare_extension_rows(ext, kept, zero, exact=False, tolerance=0.01)
    assert "passkey, YaRN vs none, alpha 2, depths: YaRN better in the record, none better in the re-run" in lines


def test_the_extension_replication_comparison_reads_its_kept_file_and_fails_a_planted_reversal():
    ext = load_script("extension")
    config = ext.replication_config(ext.CONFIG)
    kept = ext.read_rerun_bands(EXTENSION / "replication.csv")
    assert ext.reversed_verdicts(config, kept, dict(kept)) == [] and ext.broken_training(kept, dict(kept)) == []
    # PI above no scaling beyond L_0 at alpha 2, on every seed, where the replication has it below
    key = ("base", "PI", 2, config["seeds"][0], "beyond")
    assert key in kept
    high = {k: (0.99 if k[:3] == key[:3] and k[4] == "beyond" else v) for k, v in kept.items()}
    lines = ext.reversed_verdicts(config, kept, high)
    assert lines == ["base, PI vs none, alpha 2, beyond: none better in the record, PI better in the re-run"]


def test_the_real_text_comparison_reads_the_bands_as_well():
    real = load_script("real_text")
    bands = real.seed_means(real.load_bands(EXPERIMENTS / "real_text" / "bands.csv"))
    assert real.compare_means(bands, dict(bands)) == []
    key = next(k for k in bands if k[:3] == ("base", "rope", ""))
    (problem,) = real.compare_means(bands, {**bands, key: bands[key] + 0.5})
    assert problem.startswith(str(key))


def test_the_scripts_take_their_compare_arguments_as_the_workflow_passes_them(monkeypatch):
    aliasing = load_script("aliasing")
    called = []
    monkeypatch.setattr(aliasing, "compare", lambda kind, out: called.append(kind) or 0)
    for kind in ("seeds", "bases"):
        monkeypatch.setattr(sys, "argv", ["aliasing.py", "--compare", f"--{kind}"])
        assert aliasing.main() == 0
    assert called == ["seeds", "bases"]
