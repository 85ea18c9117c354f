"""The times of the recorded experiments, read from their records, as the CSV the measurements page shows.

Each recorded experiment (``experiments/<name>/record.json``, written by ``experiments/<name>.py
--record``) keeps the seconds each model took. This tool sums them into one row per record and
writes ``experiments/times.csv``, which ``book/measurements.md`` shows as a table;
``tests/test_repository.py`` checks that the CSV is what this tool makes from today's records.

Columns: the record; the chapter that reads it; the models trained (fine-tunes included); the
seconds of one core that training and evaluating them took (the sum over models, each model on
one thread); the wall-clock seconds of the whole ``--record`` (the lab ran its arms separately:
the sum of its arms); the processes that ran at once; the checkpoints' size in MB.

Usage: ``python tools/experiment_times.py`` (writes the file), ``--check`` (exit 1 if it differs).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "times.csv"
# record -> the chapter notebook that reads it
RECORDS = {"lab": "09_lab", "extension": "10_extension", "real_text": "13_real_text"}
FIELDS = ("record", "chapter", "models trained", "one core, s", "wall clock, s", "processes", "checkpoints, MB")


def row(name: str, chapter: str) -> dict:
    meta = json.loads((ROOT / "experiments" / name / "record.json").read_text())
    timings = meta["timings"].values()
    seconds = sum(t.get("train_s", 0) + t.get("eval_s", 0) + t.get("s", 0) for t in timings)
    wall = meta["total_seconds"] if "total_seconds" in meta else sum(meta["seconds_per_arm"].values())
    return {
        "record": f"experiments/{name}",
        "chapter": f"book/{chapter}.ipynb",
        "models trained": len(timings),
        "one core, s": round(seconds),
        "wall clock, s": round(wall),
        "processes": meta.get("processes", 1),
        "checkpoints, MB": f"{meta['checkpoint_bytes'] / 1e6:.1f}",
    }


def table() -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(row(name, chapter) for name, chapter in RECORDS.items())
    return out.getvalue()


def main(argv: list[str]) -> int:
    text = table()
    if argv == ["--check"]:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is not what the records give: run python tools/experiment_times.py")
            return 1
        return 0
    if argv:
        sys.exit(__doc__)
    OUT.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
