"""Re-execute the book's notebooks in place, deterministically.

Each notebook runs top to bottom in a fresh kernel (working directory: its own folder),
with no timing metadata recorded and print output joined into one block per stream, so
that executing twice gives byte-identical files. The kernel gets one compute thread
(OMP_NUM_THREADS=1, unless already set), as nbval and the Colab-like check run it.

Usage: python tools/execute_notebooks.py [PATH ...]   (folders are searched for *.ipynb)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMEOUT_S = 900  # per cell; the lab chapter trains small models


def notebooks_under(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        elif path.suffix == ".ipynb":
            found.append(path)
        else:
            raise SystemExit(f"error: not a notebook or folder: {path}")
    return found


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        # Progress-bar widgets would otherwise store their state, and the site would then load
        # the widget JavaScript from a CDN; the book has to work offline.
        store_widget_state=False,
    )
    client.execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = merge_streams(drop_widget_views(cell.outputs))
    nbformat.write(nb, path)


def drop_widget_views(outputs: list) -> list:
    """Remove widget views (tqdm progress bars): without stored widget state they cannot be shown,
    and their random model ids would change the file on every run. Their text form stays."""
    for output in outputs:
        output.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    return [o for o in outputs if o.output_type != "display_data" or o.get("data")]


def merge_streams(outputs: list) -> list:
    """Join consecutive stdout (or stderr) chunks: how a print is split depends on timing."""
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            output.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == output.name
        ):
            previous.text += output.text
        else:
            merged.append(output)
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("book")])
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits it
    for path in notebooks_under(args.paths):
        print(f"executing {path}", file=sys.stderr)
        execute(path)


if __name__ == "__main__":
    main()
