"""Run every notebook of the book as a Colab reader does, in several environments.

A reader opens a chapter in Colab: a fresh runtime with Colab's own, current packages and no
posenc. The notebook's first code cell (its set-up cell) installs posenc with pip from the
book's repository, and then every cell runs, top to bottom. This tool does the same here:

* the notebooks come from a clean clone of the committed HEAD (uncommitted changes are not
  tested), and each runs in a fresh kernel from an empty temporary folder holding only itself,
  with an empty temporary folder of its own as TMPDIR (as a fresh runtime has);
* the set-up cell's `pip install git+<repository URL>` is served from a bare clone of HEAD:
  git's `url.<base>.insteadOf`, passed to the kernel in GIT_CONFIG_* variables (the user's git
  configuration is untouched), redirects the repository URL from _config.yml to it, so nothing
  is fetched from GitHub and the committed code is what gets installed;
* posenc is uninstalled before every notebook (each Colab notebook starts a fresh runtime), and
  afterwards the check confirms that the set-up cell installed it from that URL at HEAD;
* torch.compile's cache (TORCHINDUCTOR_CACHE_DIR) is a folder of the check's own, shared by the
  environments whose torch, what it needs and Python are the same (compile_cache): the first run
  that compiles a graph compiles it from scratch, the others take it from there;
* a notebook fails on a cell error (cells tagged raises-exception excepted), on any output on
  stderr (warnings included), and on any output of its set-up cell, which must stay quiet.

Which notebook runs where is derived, not listed. Every notebook runs in the first environment
(through its real set-up cell), with a probe around it: a first, hidden cell puts a recorder in
front of Python's import system (it records every top-level module an import looks up, and every
distribution importlib.metadata is asked about, and changes nothing), and a last one reads it,
together with the modules loaded when the notebook ends. In each further environment a notebook
runs again only if it looked up a module or distribution that differs between the two
environments (a different version, or present in one only; read from each venv's metadata), since
only then can its result differ; a notebook that failed, or whose probe did not run, runs
everywhere. The report shows, for each notebook, what it touched and where it ran. --every-env
runs every notebook in every environment.

Notebooks run --jobs at a time (default: one per core, at most 4), each in its own copy of the
environment's venv (hard links, made once per venv build), since a set-up cell installs posenc
into the venv it runs in. One pool runs them all: the first environment's notebooks slowest first
(times of the last run), and a notebook's run in a further environment as soon as its first run
has ended and that environment is ready (further environments are made by a second thread while
the first environment's notebooks run).
With more than one notebook at a time, each kernel gets one thread for torch and BLAS
(OMP_NUM_THREADS=1, unless set by the caller), as make test-notebooks runs nbval: two kernels of
two threads each on two cores run several times slower than two of one thread.

Environments (--env, comma-separated; default tf5,tf4,none):
  tf5     newest transformers 5.x          each in its own venv under _build/colab-check/.venvs,
  tf4     newest transformers 4.x          with the newest releases of what Colab preinstalls
  none    no transformers                  and the notebooks use (never the book's pins)
  system  the Python running this tool, as it is: inside Colab's runtime image
          (.github/workflows/colab.yml) that is Colab's own preinstalled packages
  A requirement such as transformers==4.48.3 names an environment too: the same venv with that
  release (how the oldest transformers of posenc's `compare` extra was checked).

The first environment's venv is made from the book's own .venv when there is one (venv_from_book: a
hard-linked copy, every requirement and everything they need upgraded to the newest release that
fits, pip eagerly, and everything else uninstalled: the book's pins, posenc and the toolchain), which
gives the packages a fresh install from PyPI gives, in about 30 s instead of 80 on 2 cores, since
most wheels are already there; --from-pypi (or no .venv) builds it from PyPI. Each further one is
made from the first (derive_venv: a hard-linked copy, pip installing its own requirements and
uninstalling what nothing there needs), which gives the venv a fresh install would give, in seconds
instead of minutes. A venv is reused
while its requirement set, base Python and source venv are unchanged (a second run skips the
installs); --fresh rebuilds it with the then-newest releases. The table of results is printed and
written to _build/colab-check/report.md; the exit status is 1 if any notebook failed.

Usage: python tools/colab_check.py [--env tf5,tf4,none] [--notebooks rope,lab] [--fresh] [--from-pypi] [--every-env]
                                  [--jobs N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "colab-check"  # git-ignored; `make clean` removes it, venvs included
# A hidden folder: at every build, Sphinx's table-of-contents extension (sphinx-external-toc, as
# only_build_toc_files sets it up) globs every folder of the repository for source files, and
# glob skips hidden ones. The venvs hold about 350,000 files; in a folder named "venvs" they made
# each build (make html, and the PDF's single-page build) about 40 s slower on 2 cores.
VENVS = OUT / ".venvs"
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
    # Top-level modules and distributions the notebook looked up (None: its probe did not run).
    touched: frozenset | None = None


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


# torch and what it needs, recursively (its requirements without extras), with their versions and
# the Python's: what torch.compile's generated code can depend on.
TORCH_CLOSURE = r"""
import importlib.metadata as m, json, platform, re
todo, found = ["torch"], {}
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in found:
        continue
    try:
        dist = m.distribution(name)
    except m.PackageNotFoundError:
        found[name] = None
        continue
    found[name] = dist.version
    for requirement in dist.requires or []:
        if not re.search(r"\bextra\s*==", requirement):
            todo.append(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group())
print(json.dumps({"python": platform.python_version(), "distributions": dict(sorted(found.items()))}))
"""


def torch_closure(python: Path) -> dict:
    """The Python's version and the versions of torch and everything it needs (None: not there)."""
    return json.loads(probe(python, TORCH_CLOSURE))


def compile_cache(work: Path, closure: dict) -> Path:
    """The folder torch.compile caches its work in (TORCHINDUCTOR_CACHE_DIR) for the kernels of an
    environment with this torch_closure.

    Compiling from scratch costs a kernel 12-17 s in each of book/05_position_cost.ipynb and
    book/06_rope.ipynb (measured on 2 cores: 17.2 s against 3.3 s for the slowest cell of the first), and
    the second of them runs in every environment. The code torch.compile generates depends on torch,
    on what it needs and on the Python, not on transformers or the rest that tells the environments
    apart, so the environments with the same closure share one folder: a graph is compiled from
    scratch once per closure in every check, and a later run takes what was compiled. The folders are
    in the check's scratch folder: every check starts with none (as a fresh runtime has), and an
    environment whose torch or sympy differs compiles everything again.
    """
    digest = hashlib.sha256(json.dumps(closure, sort_keys=True).encode()).hexdigest()[:16]
    return work / "torch-compile" / digest


def requirements(name: str) -> list[str]:
    """What an environment installs on top of COLAB_PACKAGES."""
    return ENVIRONMENTS.get(name, [name])


def is_requirement(name: str) -> bool:
    """One package with one version specifier (a comma would split --env)."""
    return re.fullmatch(r"[A-Za-z][\w.-]*(==|>=|<=|~=|<|>)[\w.*]+", name) is not None


def venv_root(name: str) -> Path:
    return VENVS / re.sub(r"[^\w.-]+", "-", name)


def wanted_venv(name: str, base_python: str, source: Path | None) -> dict:
    """What a venv is made of: its stamp, compared with the built one's to decide a rebuild."""
    base_version = run([base_python, "-c", "import sys; print(sys.version)"]).strip()
    wanted = {"base_python": base_version, "requirements": COLAB_PACKAGES + requirements(name)}
    if source is not None:  # derived: made again whenever its source venv is rebuilt
        if not (source / BUILD_ID).is_file():  # a venv from before builds were stamped
            (source / BUILD_ID).write_text(f"{time.time_ns()}\n")
        wanted["derived_from"] = {"venv": source.name, "build": (source / BUILD_ID).read_text().strip()}
    return wanted


def reusable(root: Path, wanted: dict, fresh: bool) -> bool:
    stamp = root / "colab-check.json"
    return not fresh and stamp.is_file() and json.loads(stamp.read_text()) == wanted and (root / "bin/python").is_file()


def finish_venv(root: Path, wanted: dict) -> Path:
    python = root / "bin" / "python"
    # Colab's image comes with matplotlib's font cache built; build it now, not in a notebook
    # (where "Matplotlib is building the font cache" would be a line on stderr).
    run([python, "-I", "-c", "import matplotlib.pyplot"], env={**os.environ, "MPLCONFIGDIR": str(root / "mplconfig")})
    (root / "colab-check.json").write_text(json.dumps(wanted, indent=1) + "\n")
    (root / BUILD_ID).write_text(f"{time.time_ns()}\n")
    return python


def make_venv(name: str, base_python: str, fresh: bool) -> Path:
    """The venv of an environment, built with the newest releases, or reused when unchanged."""
    root = venv_root(name)
    wanted = wanted_venv(name, base_python, None)
    if reusable(root, wanted, fresh):
        return root / "bin" / "python"
    print(f"[{name}] creating {root.relative_to(ROOT)} with {' '.join(wanted['requirements'])}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    run([base_python, "-m", "venv", root])
    python = root / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    run([python, "-m", "pip", "install", "--quiet", *wanted["requirements"]])
    return finish_venv(root, wanted)


BOOK_VENV = ROOT / ".venv"  # make setup's venv: the book's pins, posenc (editable) and the toolchain


def book_venv_build() -> str | None:
    """Which install of the book's .venv it is (make setup touches .venv/.installed after each one),
    or None when there is no usable .venv."""
    stamp, python = BOOK_VENV / ".installed", BOOK_VENV / "bin" / "python"
    return str(stamp.stat().st_mtime_ns) if stamp.is_file() and python.is_file() else None


def venv_from_book(name: str, base_python: str, fresh: bool) -> Path | None:
    """The first environment's venv made from the book's .venv (see the module's docstring), or None
    when there is no .venv, or it runs another Python than `base_python`."""
    build = book_venv_build()
    if build is None:
        return None
    version = "import sys; print(sys.version)"
    base_version = run([base_python, "-c", version]).strip()
    if run([BOOK_VENV / "bin" / "python", "-c", version]).strip() != base_version:
        return None
    root = venv_root(name)
    wanted = {
        "base_python": base_version,
        "requirements": COLAB_PACKAGES + requirements(name),
        "derived_from": {"venv": ".venv", "build": build},
    }
    if reusable(root, wanted, fresh):
        return root / "bin" / "python"
    print(
        f"[{name}] creating {root.relative_to(ROOT)} from the book's .venv, upgraded to the newest:"
        f" {' '.join(wanted['requirements'])}",
        flush=True,
    )
    # eager: every dependency of the requirements to its newest fitting release, as a fresh install
    # resolves it (the book's pins are older); the orphans are posenc and the toolchain (Sphinx,
    # pytest, ...) with what only they needed
    eager = ["--upgrade", "--upgrade-strategy", "eager", *wanted["requirements"]]
    return copied_venv(BOOK_VENV, root, wanted, [["--upgrade", "pip"], eager])


def copied_venv(source: Path, root: Path, wanted: dict, installs: list[list[str]]) -> Path:
    """`root` made anew as a hard-linked copy of the venv `source`, then each of `installs` given to
    pip install in turn, then every distribution uninstalled that none of `wanted`'s requirements
    needs (ORPHANS); returns its Python."""
    shutil.rmtree(root, ignore_errors=True)
    hard_link_copy(source, root)
    python = root / "bin" / "python"
    for arguments in installs:
        run([python, "-m", "pip", "install", "--quiet", *arguments])
    orphans = json.loads(
        run([python, "-I", "-c", ORPHANS, json.dumps(wanted["requirements"])], cwd=tempfile.gettempdir())
    )
    if orphans:
        run([python, "-m", "pip", "uninstall", "--quiet", "--yes", *orphans])
    return finish_venv(root, wanted)


# Run in a venv: the distributions nothing in it needs, starting from the requirements given (pip and
# its build tools stay). A requirement's extras and environment markers are followed as pip does.
ORPHANS = """\
import importlib.metadata as m, json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name as canonical

dists = {canonical(d.metadata["Name"]): d for d in m.distributions() if d.metadata["Name"]}
needed, todo = set(), [Requirement(r) for r in json.loads(sys.argv[1])]
while todo:
    req = todo.pop()
    name = canonical(req.name)
    for extra in ["", *sorted(req.extras)]:
        if (name, extra) in needed or name not in dists:
            continue
        needed.add((name, extra))
        for line in dists[name].requires or []:
            sub = Requirement(line)
            if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                todo.append(sub)
# what a fresh `python -m venv` holds: pip, and setuptools before Python 3.12
keep = {name for name, _ in needed} | {"pip"} | ({"setuptools"} if sys.version_info < (3, 12) else set())
print(json.dumps(sorted(set(dists) - keep)))
"""


def derive_venv(name: str, source_python: Path, base_python: str, fresh: bool) -> Path:
    """An environment's venv made from another's (the first environment's), as a fresh venv of its
    requirements would be, in seconds instead of minutes: a hard-linked copy of the source venv
    (venv_copy's way), then pip installs this environment's requirements (resolved against what is
    there: a newer release pip must not keep is replaced by the newest it may), and uninstalls every
    distribution that none of COLAB_PACKAGES and this environment's requirements needs (for `none`:
    transformers and what only it needed). Remade when the source venv is rebuilt."""
    source = source_python.parent.parent
    root = venv_root(name)
    wanted = wanted_venv(name, base_python, source)
    if reusable(root, wanted, fresh):
        return root / "bin" / "python"
    print(
        f"[{name}] creating {root.relative_to(ROOT)} from {source.name}: {' '.join(wanted['requirements'])}", flush=True
    )
    return copied_venv(source, root, wanted, [requirements(name)] if requirements(name) else [])


BUILD_ID = "colab-check.build"  # which build of a venv its copies were made from
PRIVATE = ("mplconfig", "ipython")  # written while a notebook runs: each copy has its own


def venv_copy(python: Path, number: int) -> Path:
    """Copy number `number` of a venv, to run a notebook in.

    The set-up cell installs posenc into the running venv, so two notebooks at once need two
    venvs, and the venv itself is kept as built: further environments are made from it. The copy
    hard-links the venv's files (instant, no disk space; pip replaces files, it does not write into
    them) except the folders a running kernel writes to, and is made again whenever the venv is
    rebuilt. Its interpreter runs the copy: a venv is found from pyvenv.cfg beside it.
    """
    root = python.parent.parent
    copy = root.with_name(f"{root.name}-copy{number}")
    if not (root / BUILD_ID).is_file():  # a venv from before copies existed
        (root / BUILD_ID).write_text(f"{time.time_ns()}\n")
    build = (root / BUILD_ID).read_text()
    if (copy / BUILD_ID).is_file() and (copy / BUILD_ID).read_text() == build:
        return copy / "bin" / "python"
    shutil.rmtree(copy, ignore_errors=True)
    hard_link_copy(root, copy)
    (copy / BUILD_ID).write_text(build)
    return copy / "bin" / "python"


def hard_link_copy(root: Path, copy: Path) -> None:
    """A copy of a venv whose files are hard links to the original's (pip and Python replace files,
    they do not write into them), except the folders a running kernel writes to, which are copied,
    and the stamps, which belong to the original. The console scripts in bin/ that start the
    original's Python are replaced by ones that start the copy's (a new file each: writing into a
    hard link would change the original's too)."""
    shutil.copytree(
        root,
        copy,
        symlinks=True,
        copy_function=os.link,
        ignore=lambda d, names: [*PRIVATE, BUILD_ID, "colab-check.json", ".installed"] if d == str(root) else (),
    )
    for name in PRIVATE:
        if (root / name).is_dir():
            shutil.copytree(root / name, copy / name, symlinks=True)
    old, new = f"#!{root.absolute() / 'bin'}/".encode(), f"#!{copy.absolute() / 'bin'}/".encode()
    for script in (copy / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as handle:
            if handle.read(len(old)) != old:
                continue
            text = new + handle.read()
        fresh = script.with_name(script.name + ".colab-check-new")
        fresh.write_bytes(text)
        fresh.chmod(script.stat().st_mode)
        os.replace(fresh, script)


def kernel_environment(base: dict, venv: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV_DROP and not k.startswith(("JPY_", "JUPYTER_"))}
    if venv is not None:  # as if the venv were the system: its bin first, its own config folders
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["MPLCONFIGDIR"] = str(venv / "mplconfig")
        env["IPYTHONDIR"] = str(venv / "ipython")  # no startup files of this machine's user
    return {**env, **base}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def one_thread(env: dict) -> None:
    """One compute thread per kernel, for kernels that share the cores; a value the caller set stays."""
    for variable in THREAD_VARIABLES:
        env.setdefault(variable, "1")


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


def normalized(name: str) -> str:
    """A distribution or module name as the probe writes it (PEP 503: runs of -_. become -)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: Path) -> tuple[dict, dict]:
    """A venv's distributions {normalized name: version} and {top-level module: [distributions]}."""
    code = (
        "import importlib.metadata as m, json\n"
        "dists = [[d.metadata['Name'], d.version] for d in m.distributions() if d.metadata['Name']]\n"
        "print(json.dumps([dists, m.packages_distributions()]))"
    )
    dists, modules = json.loads(probe(python, code))
    return (
        {normalized(name): version for name, version in dists},
        {module: sorted({normalized(n) for n in names}) for module, names in modules.items()},
    )


def differing(first: tuple[dict, dict], other: tuple[dict, dict]) -> frozenset:
    """Names (distributions and their top-level modules) that differ between two environments.

    A distribution differs if its version differs or only one environment has it; posenc, which
    the set-up cell installs afresh in each, never does.
    """
    (dists_a, modules_a), (dists_b, modules_b) = first, other
    names = {n for n in dists_a.keys() | dists_b.keys() if dists_a.get(n) != dists_b.get(n)} - {"posenc"}
    modules = {
        normalized(module)
        for mapping in (modules_a, modules_b)
        for module, owners in mapping.items()
        if names.intersection(owners)
    }
    return frozenset(names | modules)


def can_differ(touched: frozenset | None, differ: frozenset) -> bool:
    """Whether a notebook's result can differ in an environment: it touched something that differs
    there, or what it touched is unknown (it failed, or its probe did not run)."""
    return touched is None or bool(touched & differ)


# The probe around a notebook (see the module's docstring): two code cells, removed again before the
# outputs are checked. The recorder answers no lookup (it returns None), so imports are unchanged.
PROBE_START = """\
import sys as _colab_check_sys


class _ColabCheckRecorder:
    names = set()

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        cls.names.add(name.partition(".")[0])

    @classmethod
    def find_distributions(cls, context=None):
        if getattr(context, "name", None):
            cls.names.add(context.name)
        return iter(())


_colab_check_sys.meta_path.insert(0, _ColabCheckRecorder)
"""
# prints the names as found; remove_probe normalizes them
PROBE_END = """\
import json as _colab_check_json

print(_colab_check_json.dumps(sorted(
    _ColabCheckRecorder.names | {m.partition(".")[0] for m in _colab_check_sys.modules}
)))
"""
PROBE_TAG = "colab-check-probe"


def add_probe(nb) -> None:
    start = nbformat.v4.new_code_cell(PROBE_START, metadata={"tags": [PROBE_TAG]})
    end = nbformat.v4.new_code_cell(PROBE_END, metadata={"tags": [PROBE_TAG]})
    nb.cells = [start, *nb.cells, end]


def remove_probe(nb) -> frozenset | None:
    """Takes the probe's cells out again; returns what the notebook touched, or None if unknown."""
    start, *cells, end = nb.cells
    nb.cells = cells
    if start.get("outputs") or not end.get("outputs"):
        return None
    text = "".join(o.get("text", "") for o in end.outputs if o.output_type == "stream" and o.name == "stdout")
    try:
        return frozenset(normalized(name) for name in json.loads(text))
    except ValueError:
        return None


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
        add_probe(nb)
        client = NotebookClient(
            nb,
            timeout=TIMEOUT_S,
            kernel_name=kernel_name,
            resources={"metadata": {"path": folder}},
            store_widget_state=False,
        )
        try:
            # A fresh runtime has an empty temporary folder: each run gets its own (two notebooks
            # running at once must not meet there, nor find what an earlier run left).
            scratch = Path(folder) / "tmp"
            scratch.mkdir()
            client.execute(env={**env.kernel_env, "TMPDIR": str(scratch)}, stdout=log, stderr=subprocess.STDOUT)
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
    touched = remove_probe(nb)

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
    return Result(path.stem, env.name, not problems, seconds, problems, touched)


def show(result: Result) -> None:
    print(f"[{result.env}] {result.notebook:20s} {'pass' if result.ok else 'FAIL'} {result.seconds:6.1f} s", flush=True)
    for problem in result.problems:
        print("    " + problem.replace("\n", "\n    "), flush=True)


def longest_first(paths: list[Path]) -> list[Path]:
    """The notebooks, the slowest of the last run first (so that no long one starts last)."""
    last = json.loads(TIMES.read_text()) if TIMES.is_file() else {}
    return sorted(paths, key=lambda p: (-last.get(p.stem, 0.0), p.name))


TIMES = OUT / "times.json"  # each notebook's seconds in the first environment of the last run


# ---------------------------------------------------------------------------------------------
# Report


def table(results: list[Result], envs: list[Environment]) -> str:
    notebooks = list(dict.fromkeys(r.notebook for r in results))
    first = envs[0].name
    cell = {(r.notebook, r.env): f"{'pass' if r.ok else '**FAIL**'} {r.seconds:.0f} s" for r in results}
    cell = {(nb, e.name): cell.get((nb, e.name), f"as {first}") for nb in notebooks for e in envs[1:]} | cell
    lines = ["| notebook | " + " | ".join(e.name for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
    for nb in notebooks:
        lines.append(f"| {nb} | " + " | ".join(cell.get((nb, e.name), "-") for e in envs) + " |")
    totals = [sum(r.seconds for r in results if r.env == e.name) for e in envs]
    lines.append("| total | " + " | ".join(f"{t:.0f} s" for t in totals) + " |")
    lines += ["", "| package | " + " | ".join(e.name for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
    for name in REPORTED:
        lines.append(f"| {name} | " + " | ".join(str(e.versions.get(name) or "-") for e in envs) + " |")
    return "\n".join(lines)


def where(results: list[Result], envs: list[Environment], differ: dict) -> str:
    """Why each notebook ran where it did: what it touched of what differs from the first environment."""
    first = envs[0].name
    lines = [
        f"Every notebook ran in {first}; in another environment only if it touched a module or",
        f'distribution that differs there from {first} ("as {first}" above: it touched none).',
        "",
        "| notebook | " + " | ".join(f"touched of what differs in {e.name}" for e in envs[1:]) + " |",
        "|---" * len(envs) + "|",
    ]
    for r in results:
        if r.env != first:
            continue
        row = []
        for e in envs[1:]:
            if r.touched is None or not r.ok:
                row.append("unknown (failed, or no probe result): ran")
            else:
                # what the environment is about (transformers) first, then what came with it
                named = [q for reqs in ENVIRONMENTS.values() for q in reqs] + requirements(e.name)
                about = {normalized(re.split(r"[<>=!~]", q)[0]) for q in named}
                hit = sorted(r.touched & differ[e.name], key=lambda n: (n not in about, n))
                row.append(", ".join(hit[:4]) + (f" and {len(hit) - 4} more" if len(hit) > 4 else "") or "nothing")
        lines.append(f"| {r.notebook} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def report(results: list[Result], envs: list[Environment], head: str, seconds: float, differ: dict) -> str:
    failed = [r for r in results if not r.ok]
    parts = [
        "# Colab check",
        "",
        f"HEAD {head}; {len(results) - len(failed)} of {len(results)} notebook runs passed in {seconds:.0f} s.",
        "",
        table(results, envs),
    ]
    if len(envs) > 1 and differ:
        parts += ["", where(results, envs, differ)]
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
    parser.add_argument(
        "--from-pypi", action="store_true", help="build the first venv from PyPI, not from the book's .venv"
    )
    parser.add_argument("--every-env", action="store_true", help="run every notebook in every environment")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser.add_argument("--jobs", type=int, default=min(cores, 4), help="notebooks at once (default: cores, at most 4)")
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
    differ: dict[str, frozenset] = {}  # environment -> names that differ there from the first
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

        def prepare(name: str, first: Environment | None) -> tuple[Environment, list, tuple]:
            """An environment, its slots (a venv copy and its kernel each) and its distributions."""
            if name == SYSTEM:
                env = Environment(name, Path(sys.executable), kernel_environment(base, None))
            else:
                if first is not None and first.name != SYSTEM:
                    python = derive_venv(name, first.python, args.python, args.fresh)
                else:
                    python = None if args.from_pypi else venv_from_book(name, args.python, args.fresh)
                    python = python or make_venv(name, args.python, args.fresh)
                env = Environment(name, python, kernel_environment(base, python.parent.parent))
            env.versions = versions(env.python)
            if name == "none" and env.versions["transformers"]:
                raise SystemExit("error: transformers got into the 'none' environment")
            described = ", ".join(f"{k} {env.versions[k]}" for k in REPORTED if env.versions[k])
            print(f"[{name}] {described}", flush=True)
            if name == SYSTEM:  # Colab's own Python cannot be copied: one notebook at a time there
                slots = [(env, write_kernelspec(work / "jupyter", name, env.python))]
            else:
                # Notebooks run in copies only, so that the venv itself stays as built (further
                # environments are made from it while notebooks run).
                slots = []
                for number in range(1, args.jobs + 1):
                    copy = venv_copy(env.python, number)
                    twin = Environment(name, copy, kernel_environment(base, copy.parent.parent), env.versions)
                    slots.append((twin, write_kernelspec(work / "jupyter", f"{name}-{number}", copy)))
            if len(slots) > 1:
                for slot, _ in slots:
                    one_thread(slot.kernel_env)
            cache = compile_cache(work, torch_closure(env.python))
            for slot, _ in slots:
                slot.kernel_env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
            print(f"[{name}] torch.compile's cache: {cache.name} (one per torch closure)", flush=True)
            return env, slots, installed(env.python)

        first, first_slots, first_packages = prepare(names[0], None)
        envs.append(first)
        free: dict[str, queue.Queue] = {}

        def add_slots(name: str, slots: list) -> None:
            free[name] = queue.Queue()
            for slot in slots:
                free[name].put(slot)

        def one(path: Path, name: str) -> Result:
            slot, kernel_name = free[name].get()
            try:
                return run_notebook(path, slot, kernel_name, url, head)
            finally:
                free[name].put((slot, kernel_name))

        add_slots(first.name, first_slots)
        all_slots = list(first_slots)
        first_touched: dict[str, frozenset | None] = {}
        decided: set[tuple[str, str]] = set()
        # One pool runs every notebook, the first environment's slowest first; a notebook's run in a
        # further environment joins the queue as soon as both its first run and that environment
        # (made meanwhile, one after another, by a second thread) are ready.
        with ThreadPoolExecutor(max_workers=args.jobs) as pool, ThreadPoolExecutor(max_workers=1) as builder:
            pending = {pool.submit(one, path, first.name) for path in longest_first(notebooks)}
            later = {builder.submit(prepare, name, first): name for name in names[1:]}
            pending |= set(later)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future in later:
                        env, slots, packages = future.result()
                        envs.append(env)
                        add_slots(env.name, slots)
                        all_slots += slots
                        differ[env.name] = differing(first_packages, packages)
                        print(f"[{env.name}] differs from {first.name} in {len(differ[env.name])} names", flush=True)
                        continue
                    result = future.result()
                    show(result)
                    results.append(result)
                    if result.env == first.name:
                        first_touched[result.notebook] = result.touched if result.ok else None
                for name in differ:  # beyond the first environment: only where a result can differ
                    for path in notebooks:
                        if path.stem in first_touched and (path.stem, name) not in decided:
                            decided.add((path.stem, name))
                            if args.every_env or can_differ(first_touched[path.stem], differ[name]):
                                pending.add(pool.submit(one, path, name))
        envs.sort(key=lambda e: names.index(e.name))
        results.sort(key=lambda r: (names.index(r.env), r.notebook))
        last = json.loads(TIMES.read_text()) if TIMES.is_file() else {}
        first_seconds = {r.notebook: round(r.seconds, 1) for r in results if r.env == first.name}
        TIMES.write_text(json.dumps(last | first_seconds, indent=1) + "\n")
        for slot, _ in all_slots:
            uninstall_posenc(slot.python)  # leave the Pythons as they were found
    text = report(results, envs, head, time.perf_counter() - start, differ)
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
