"""Run every notebook of the book as a Colab reader does, in several environments.

A reader opens a chapter in Colab: a fresh runtime with Colab's own, current packages and no
posenc. The notebook's first code cell (its set-up cell) installs posenc with pip from the
book's repository, and then every cell runs, top to bottom. This tool does the same here:

* the notebooks come from a clean clone of the committed HEAD (uncommitted changes are not
  tested), and each runs in a fresh kernel from an empty temporary folder holding only itself;
* the set-up cell's `pip install git+<repository URL>` is served from a bare clone of HEAD:
  git's `url.<base>.insteadOf`, passed to the kernel in GIT_CONFIG_* variables (the user's git
  configuration is untouched), redirects the repository URL from _config.yml to it, so nothing
  is fetched from GitHub and the committed code is what gets installed;
* posenc is uninstalled before every notebook (each Colab notebook starts a fresh runtime), and
  afterwards the check confirms that the set-up cell installed it from that URL at HEAD;
* a notebook fails on a cell error (cells tagged raises-exception excepted), on any output on
  stderr (warnings included), and on any output of its set-up cell, which must stay quiet.

Environments (--env, comma-separated; default tf5,tf4,none):
  tf5     newest transformers 5.x          each in its own venv under _build/colab-check/venvs,
  tf4     newest transformers 4.x          with the newest releases of what Colab preinstalls
  none    no transformers                  and the notebooks use (never the book's pins)
  system  the Python running this tool, as it is: inside Colab's runtime image
          (.github/workflows/colab.yml) that is Colab's own preinstalled packages
  A requirement such as transformers==4.48.3 names an environment too: the same venv with that
  release (how the oldest transformers of posenc's `compare` extra was checked).

A venv is reused while its requirement set and base Python are unchanged (a second run skips the
installs); --fresh rebuilds it with the then-newest releases. The table of results is printed and
written to _build/colab-check/report.md; the exit status is 1 if any notebook failed.

Usage: python tools/colab_check.py [--env tf5,tf4,none] [--notebooks rope,lab] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "colab-check"  # git-ignored; `make clean` removes it, venvs included
VENVS = OUT / "venvs"
# Per cell. The lab chapter trains seven small models: on a busy 2-core machine its training cell
# took over 900 s (tools/execute_notebooks.py's limit), so this check, which is about whether a
# notebook runs rather than how fast, allows more.
TIMEOUT_S = 2400

# What Colab preinstalls and the notebooks (or this check's kernel) use, unpinned: the newest
# releases. ipywidgets is left out on purpose: the notebooks must not need it.
COLAB_PACKAGES = [
    "numpy",
    "matplotlib",
    "ipykernel",
    "nbclient",  # not used by the notebooks; lets `--env system` be tried with a venv's Python
    "tqdm",
    # Stands in for Colab's preinstalled torch. An unpinned torch from PyPI is a multi-GB CUDA
    # build that no reader ever installs; this pin resolves to the CPU build on this machine's
    # and CI's disk (pip's find-links), as the book's requirements.txt does.
    "torch==2.13.0",
]
ENVIRONMENTS = {
    "tf5": ["transformers>=5,<6"],
    "tf4": ["transformers<5"],
    "none": [],
}
SYSTEM = "system"
REPORTED = ["python", "torch", "numpy", "matplotlib", "ipykernel", "transformers"]
# Variables of this shell that a fresh Colab kernel would not have.
KERNEL_ENV_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "MPLBACKEND")


def repository_url() -> str:
    """The repository URL from _config.yml (the one place it is written)."""
    text = (ROOT / "_config.yml").read_text()
    match = re.search(r"^repository:\s*\n(?:[ \t]+.*\n)*?[ \t]+url:\s*(\S+)", text, re.MULTILINE)
    if not match:
        raise SystemExit("error: no repository url in _config.yml")
    return match.group(1)


def run(cmd: list, **kwargs) -> str:
    """Run a command; on failure stop with its output."""
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        raise SystemExit(f"error: {' '.join(map(str, cmd))} exited {result.returncode}\n{result.stdout}{result.stderr}")
    return result.stdout


@dataclass
class Environment:
    name: str
    python: Path  # the kernel's interpreter
    kernel_env: dict
    versions: dict = field(default_factory=dict)


@dataclass
class Result:
    notebook: str
    env: str
    ok: bool
    seconds: float
    problems: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# The repository: a bare clone of HEAD to install from, and a clean checkout to take notebooks from


def snapshot(work: Path) -> Path:
    """A new repository whose one commit has HEAD's files (for a shallow clone of this one)."""
    folder, archive = work / "snapshot", work / "head.tar"
    folder.mkdir()
    run(["git", "-C", ROOT, "archive", "--output", archive, "HEAD"])
    run(["tar", "-x", "-f", archive, "-C", folder])
    run(["git", "init", "--quiet", folder])
    run(["git", "-C", folder, "add", "--all"])
    identity = ["-c", "user.name=colab-check", "-c", "user.email=colab-check@localhost"]
    run(["git", "-C", folder, *identity, "commit", "--quiet", "--no-verify", "-m", "HEAD's files"])
    return folder


def clone_head(work: Path) -> tuple[Path, Path, str]:
    """A bare repository holding HEAD as its default branch `main`, a checkout of it, and its commit."""
    if run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).strip():
        print("note: uncommitted changes are not tested: the check runs the committed HEAD", file=sys.stderr)
    source = ROOT
    if run(["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"]).strip() == "true":
        # pip clones with --filter=blob:none, and a partial clone of a shallow repository keeps
        # asking it for the parents it does not have: serve a one-commit copy of HEAD's files.
        print("note: shallow clone: posenc is installed from a one-commit copy of HEAD's files", file=sys.stderr)
        source = snapshot(work)
    head = run(["git", "-C", source, "rev-parse", "HEAD"]).strip()
    bare = work / "repository.git"
    run(["git", "init", "--quiet", "--bare", bare])
    # The default branch is HEAD's commit, even on a detached HEAD (as actions/checkout leaves it).
    run(["git", "-C", bare, "fetch", "--quiet", source, "HEAD:refs/heads/main"])
    run(["git", "-C", bare, "symbolic-ref", "HEAD", "refs/heads/main"])
    run(["git", "-C", bare, "config", "uploadpack.allowFilter", "true"])  # pip clones with --filter
    checkout = work / "checkout"
    run(["git", "clone", "--quiet", bare.as_uri(), checkout])
    return bare, checkout, head


def redirect(url: str, bare: Path) -> dict:
    """GIT_CONFIG_* variables that make git fetch `url` from `bare` (git 2.31+)."""
    count = int(os.environ.get("GIT_CONFIG_COUNT", "0"))  # keep any the caller has set
    return {
        "GIT_CONFIG_COUNT": str(count + 1),
        f"GIT_CONFIG_KEY_{count}": f"url.{bare.as_uri()}.insteadOf",
        f"GIT_CONFIG_VALUE_{count}": url,
    }


# ---------------------------------------------------------------------------------------------
# Environments


def probe(python: Path, code: str) -> str:
    """Run code in that Python, isolated from this shell's PYTHONPATH and current folder."""
    return run([python, "-I", "-c", code], cwd=tempfile.gettempdir())


def versions(python: Path) -> dict:
    code = (
        "import importlib.metadata as m, json, platform\n"
        f"names = {REPORTED[1:]!r}\n"
        "found = {}\n"
        "for n in names:\n"
        "    try:\n"
        "        found[n] = m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        found[n] = None\n"
        "found['python'] = platform.python_version()\n"
        "print(json.dumps(found))"
    )
    return json.loads(probe(python, code))


def requirements(name: str) -> list[str]:
    """What an environment installs on top of COLAB_PACKAGES."""
    return ENVIRONMENTS.get(name, [name])


def is_requirement(name: str) -> bool:
    """One package with one version specifier (a comma would split --env)."""
    return re.fullmatch(r"[A-Za-z][\w.-]*(==|>=|<=|~=|<|>)[\w.*]+", name) is not None


def make_venv(name: str, base_python: str, fresh: bool) -> Path:
    """The venv of an environment, built with the newest releases, or reused when unchanged."""
    root = VENVS / re.sub(r"[^\w.-]+", "-", name)
    python = root / "bin" / "python"
    base_version = run([base_python, "-c", "import sys; print(sys.version)"]).strip()
    wanted = {"base_python": base_version, "requirements": COLAB_PACKAGES + requirements(name)}
    stamp = root / "colab-check.json"
    if not fresh and stamp.is_file() and json.loads(stamp.read_text()) == wanted and python.is_file():
        return python
    print(f"[{name}] creating {root.relative_to(ROOT)} with {' '.join(wanted['requirements'])}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    run([base_python, "-m", "venv", root])
    run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    run([python, "-m", "pip", "install", "--quiet", *wanted["requirements"]])
    # Colab's image comes with matplotlib's font cache built; build it now, not in a notebook
    # (where "Matplotlib is building the font cache" would be a line on stderr).
    run([python, "-I", "-c", "import matplotlib.pyplot"], env={**os.environ, "MPLCONFIGDIR": str(root / "mplconfig")})
    stamp.write_text(json.dumps(wanted, indent=1) + "\n")
    return python


def kernel_environment(base: dict, venv: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV_DROP and not k.startswith(("JPY_", "JUPYTER_"))}
    if venv is not None:  # as if the venv were the system: its bin first, its own config folders
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["MPLCONFIGDIR"] = str(venv / "mplconfig")
        env["IPYTHONDIR"] = str(venv / "ipython")  # no startup files of this machine's user
    return {**env, **base}


def write_kernelspec(kernels: Path, name: str, python: Path) -> str:
    """A kernelspec that starts ipykernel with that Python; returns its name."""
    kernel_name = f"colab-check-{name}"
    folder = kernels / "kernels" / kernel_name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({name})",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return kernel_name


def posenc_installed(python: Path) -> bool:
    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('posenc') else 1)"
    return subprocess.run([python, "-I", "-c", code], cwd=tempfile.gettempdir(), check=False).returncode == 0


def uninstall_posenc(python: Path) -> None:
    if posenc_installed(python):
        run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "posenc"])


def installed_from(python: Path) -> dict | None:
    """posenc's PEP 610 record (direct_url.json): the URL and commit pip installed it from."""
    code = (
        "import importlib.metadata as m\n"
        "try:\n"
        "    print(m.distribution('posenc').read_text('direct_url.json') or '')\n"
        "except m.PackageNotFoundError:\n"
        "    print('')"
    )
    text = probe(python, code).strip()
    return json.loads(text) if text else None


# ---------------------------------------------------------------------------------------------
# One notebook


ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours of IPython's tracebacks


def short(text: str, lines: int = 6) -> str:
    kept = ANSI.sub("", text).strip().splitlines()
    return "\n".join(kept[:lines] + (["..."] if len(kept) > lines else []))


def run_notebook(path: Path, env: Environment, kernel_name: str, url: str, head: str) -> Result:
    uninstall_posenc(env.python)  # a fresh runtime: the set-up cell must install posenc
    problems = []
    start = time.perf_counter()
    # The kernel process's own console output (not the notebook's): kept aside, shown if it dies.
    with tempfile.TemporaryDirectory(prefix="colab-check-") as folder, tempfile.TemporaryFile("w+") as log:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(copy, as_version=4)
        client = NotebookClient(
            nb,
            timeout=TIMEOUT_S,
            kernel_name=kernel_name,
            resources={"metadata": {"path": folder}},
            store_widget_state=False,
        )
        try:
            client.execute(env=env.kernel_env, stdout=log, stderr=subprocess.STDOUT)
        except CellExecutionError as error:
            failed = [
                f"{i} ({c.get('id')})"
                for i, c in enumerate(nb.cells)
                if any(o.output_type == "error" for o in c.get("outputs", []))
                and "raises-exception" not in c.metadata.get("tags", [])
            ]
            where = f"cell {failed[0]}" if failed else "a cell"
            last = "\n".join(ANSI.sub("", str(error)).strip().splitlines()[-8:])  # the traceback's end
            problems.append(f"error in {where}: {error.ename}: {error.evalue}\n{last}")
        except (CellTimeoutError, DeadKernelError) as error:
            log.seek(0)
            problems.append(f"{type(error).__name__}: {short(str(error))}\nkernel log:\n{short(log.read(), 20)}")
    seconds = time.perf_counter() - start

    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if code_cells and code_cells[0][1].get("outputs"):
        index, cell = code_cells[0]
        shown = "".join(o.get("text", "") or json.dumps(o.get("data", o.get("evalue", ""))) for o in cell.outputs)
        problems.append(f"the set-up cell (cell {index}) is not quiet: {short(shown)}")
    for index, cell in code_cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream" and output.name == "stderr":
                problems.append(f"stderr in cell {index} ({cell.get('id')}): {short(output.text)}")
    record = installed_from(env.python)
    expected = {"url": url, "commit_id": head}
    got = record and {"url": record.get("url"), "commit_id": record.get("vcs_info", {}).get("commit_id")}
    if got != expected:
        problems.append(f"the set-up cell did not install posenc from {url} at {head[:12]}: {record}")
    return Result(path.stem, env.name, not problems, seconds, problems)


# ---------------------------------------------------------------------------------------------
# Report


def table(results: list[Result], envs: list[Environment]) -> str:
    notebooks = list(dict.fromkeys(r.notebook for r in results))
    cell = {(r.notebook, r.env): f"{'pass' if r.ok else '**FAIL**'} {r.seconds:.0f} s" for r in results}
    lines = ["| notebook | " + " | ".join(e.name for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
    for nb in notebooks:
        lines.append(f"| {nb} | " + " | ".join(cell.get((nb, e.name), "-") for e in envs) + " |")
    totals = [sum(r.seconds for r in results if r.env == e.name) for e in envs]
    lines.append("| total | " + " | ".join(f"{t:.0f} s" for t in totals) + " |")
    lines += ["", "| package | " + " | ".join(e.name for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
    for name in REPORTED:
        lines.append(f"| {name} | " + " | ".join(str(e.versions.get(name) or "-") for e in envs) + " |")
    return "\n".join(lines)


def report(results: list[Result], envs: list[Environment], head: str, seconds: float) -> str:
    failed = [r for r in results if not r.ok]
    parts = [
        "# Colab check",
        "",
        f"HEAD {head}; {len(results) - len(failed)} of {len(results)} notebook runs passed in {seconds:.0f} s.",
        "",
        table(results, envs),
    ]
    for r in failed:
        parts += ["", f"## {r.notebook} [{r.env}]", "", "```", *r.problems, "```"]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="tf5,tf4,none", help=f"comma-separated: {', '.join([*ENVIRONMENTS, SYSTEM])}")
    parser.add_argument("--notebooks", default="", help="comma-separated parts of notebook names (default: all)")
    parser.add_argument("--python", default=getattr(sys, "_base_executable", sys.executable), help="base of the venvs")
    parser.add_argument("--fresh", action="store_true", help="rebuild the venvs with the newest releases")
    parser.add_argument("--report", type=Path, default=OUT / "report.md")
    args = parser.parse_args()
    names = [n for n in args.env.split(",") if n]
    unknown = {n for n in names if n not in {*ENVIRONMENTS, SYSTEM} and not is_requirement(n)}
    if unknown or not names:
        parser.error(f"unknown environment {sorted(unknown)}; choose from {[*ENVIRONMENTS, SYSTEM]} or a requirement")
    if SYSTEM in names and posenc_installed(Path(sys.executable)):
        parser.error(f"posenc is installed in {sys.executable}: --env system needs a Python without it (Colab's)")

    start = time.perf_counter()
    url = repository_url()
    OUT.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    envs: list[Environment] = []
    with tempfile.TemporaryDirectory(prefix="colab-check-repo-") as scratch:
        work = Path(scratch)
        bare, checkout, head = clone_head(work)
        notebooks = sorted(p for p in (checkout / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        wanted = [w for w in args.notebooks.split(",") if w]
        notebooks = [p for p in notebooks if not wanted or any(w in p.name for w in wanted)]
        if not notebooks:
            parser.error(f"no notebook matches {args.notebooks!r}")
        os.environ["JUPYTER_PATH"] = str(work / "jupyter")  # where our kernelspecs are found first
        base = redirect(url, bare)
        for name in names:
            if name == SYSTEM:
                env = Environment(name, Path(sys.executable), kernel_environment(base, None))
            else:
                python = make_venv(name, args.python, args.fresh)
                env = Environment(name, python, kernel_environment(base, python.parent.parent))
            env.versions = versions(env.python)
            if name == "none" and env.versions["transformers"]:
                raise SystemExit("error: transformers got into the 'none' environment")
            envs.append(env)
            kernel_name = write_kernelspec(work / "jupyter", name, env.python)
            described = ", ".join(f"{k} {env.versions[k]}" for k in REPORTED if env.versions[k])
            print(f"[{name}] {described}", flush=True)
            for path in notebooks:
                result = run_notebook(path, env, kernel_name, url, head)
                results.append(result)
                print(f"[{name}] {path.stem:20s} {'pass' if result.ok else 'FAIL'} {result.seconds:6.1f} s", flush=True)
                for problem in result.problems:
                    print("    " + problem.replace("\n", "\n    "), flush=True)
            uninstall_posenc(env.python)  # leave the Python as it was found
    text = report(results, envs, head, time.perf_counter() - start)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print()
    print(text)
    print(f"written to {args.report}")
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")  # the closing line CI reads
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
