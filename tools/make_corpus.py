"""Build posenc's real-text corpus (``code/src/posenc/data/``) from a CPython 3.11 standard library.

Issue 22: the real-text chapter (``book/13_real_text.ipynb``) trains byte-level models on text
nobody in this project wrote. The text is a fixed slice of CPython's standard library source,
under the PSF License Agreement (shipped beside it as ``CPYTHON_LICENSE.txt``). The rule, applied to
the top-level ``Lib/*.py`` files of one CPython release in name order:

* skip the build-generated ``_sysconfigdata*`` modules, files under 2,000 bytes, files over
  64,000 bytes and files with any non-ASCII byte (so one byte is one character);
* of the files left, every 8th (index 7, 15, ...) is the validation split, the rest train;
* each split is its files' bytes joined in name order, gzip-compressed with ``mtime=0``.

``manifest.json`` lists each split's files with their sizes and SHA-256, the release and the
whole split's SHA-256; :func:`posenc.corpus.load_split` checks that hash on every load.

Usage: ``python tools/make_corpus.py /path/to/lib/python3.11 3.11.7`` (the ``Lib`` folder of an
installed or checked-out CPython, and its release; its ``LICENSE.txt`` is read from that folder).
The shipped files were made from CPython 3.11.7's installed ``lib/python3.11``.
Re-running it on the same release writes byte-identical files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "code" / "src" / "posenc" / "data"
MIN_BYTES, MAX_BYTES, VALIDATION_EVERY = 2_000, 64_000, 8


def select(lib: Path) -> list[Path]:
    files = []
    for path in sorted(lib.glob("*.py"), key=lambda p: p.name):
        data = path.read_bytes()
        if path.name.startswith("_sysconfigdata") or not MIN_BYTES <= len(data) <= MAX_BYTES:
            continue
        if any(byte > 127 for byte in data):
            continue
        files.append(path)
    return files


def main(lib: Path, version: str) -> None:
    license_file = lib / "LICENSE.txt"
    files = select(lib)
    splits = {"train": [], "validation": []}
    for index, path in enumerate(files):
        splits["validation" if index % VALIDATION_EVERY == VALIDATION_EVERY - 1 else "train"].append(path)
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {
        "source": "CPython standard library, top-level Lib/*.py",
        "release": version,
        "licence": "PSF License Agreement (CPYTHON_LICENSE.txt)",
        "rule": (
            f"Lib/*.py in name order; skip _sysconfigdata*, files under {MIN_BYTES} or over {MAX_BYTES}"
            f" bytes and files with a non-ASCII byte; every {VALIDATION_EVERY}th of the rest"
            " (index 7, 15, ...) is validation"
        ),
        "splits": {},
    }
    for split, paths in splits.items():
        data = b"".join(path.read_bytes() for path in paths)
        (OUT / f"cpython_{split}.txt.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        manifest["splits"][split] = {
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "files": [
                {
                    "name": f"Lib/{p.name}",
                    "bytes": p.stat().st_size,
                    "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                }
                for p in paths
            ],
        }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (OUT / "CPYTHON_LICENSE.txt").write_bytes(license_file.read_bytes())
    for split, info in manifest["splits"].items():
        print(f"{split}: {len(info['files'])} files, {info['bytes']} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2])
