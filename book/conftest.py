"""pytest, for the nbval run over the notebooks (make test-notebooks):
a kernel that dies while it starts is started again, up to three times.

Two pytest-xdist workers can start kernels at the same moment.
jupyter_client chooses a kernel's TCP ports before the kernel binds
them, so two kernels can choose the same port, and the one that loses
dies before it answers ("Kernel died before replying to kernel_info":
seen once here, every cell of chapter 9 erroring in one make test, its
rerun passing). Only the start is retried: a cell that fails, or a
kernel that dies while it runs a cell, fails as before.
"""

from __future__ import annotations

ATTEMPTS = 3


def retrying(start, attempts: int = ATTEMPTS):
    """``start`` (nbval's ``start_new_kernel``), tried again when it
    raises RuntimeError, which jupyter_client raises for a kernel that
    died or did not answer while starting. After ``attempts`` failures
    the last error is raised; any other error is raised at once."""

    def start_new_kernel(*args, **kwargs):
        for attempt in range(1, attempts + 1):
            try:
                return start(*args, **kwargs)
            except RuntimeError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    return start_new_kernel


def pytest_configure(config):
    if config.getoption("nbval", default=False):
        import nbval.kernel

        nbval.kernel.start_new_kernel = retrying(
            nbval.kernel.start_new_kernel
        )
