"""Run a benchmark's measurements in a child process under given glibc malloc tunables.

CPU timings of large temporaries depend on how glibc hands memory back to the kernel, and
GLIBC_TUNABLES is read only when a process starts; so each configuration runs in its own child,
which prints its results as one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_child(script: str, flag: str, tunables: str | None) -> dict:
    """Run ``python script flag`` with GLIBC_TUNABLES set to ``tunables`` (or unset); return its JSON."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    out = subprocess.run([sys.executable, script, flag], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
