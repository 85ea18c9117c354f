"""Record a benchmark run as CSV files under benchmarks/results/, which the book's page
``book/measurements.md`` shows as tables (``csv-table`` directives): the book's speed figures come
from a recorded run, never typed by hand.

Usage from a benchmark: ``record("rope", header, rows)`` when it is run with ``--record``.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> list[tuple[str, str]]:
    """What the figures were measured on: machine, versions, date."""
    import torch
    import transformers

    return [
        ("CPU", _cpu_model()),
        ("cores available", str(len(os.sched_getaffinity(0)))),
        ("Python", platform.python_version()),
        ("torch", torch.__version__),
        ("transformers", transformers.__version__),
        ("date (UTC)", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")),
    ]


def record(name: str, header: list[str], rows: list[list[str]]) -> None:
    """Write ``results/NAME.csv`` (the table) and ``results/NAME-environment.csv`` (where it was measured)."""
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"{name}.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *rows])
    with open(RESULTS / f"{name}-environment.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([["항목", "값"], *environment()])
    print(f"recorded {RESULTS / name}.csv")
