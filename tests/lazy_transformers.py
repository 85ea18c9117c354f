"""One lazy import of transformers for the tests that compare posenc with it (not a test module).

The tests against the papers must run without transformers installed (it is an optional extra): a
test that needs it calls :func:`transformers_attr`, which skips that test when the package is absent.
"""

import importlib

import pytest


def transformers_attr(path):
    """``transformers.<path>``: a module (``models.llama.modeling_llama``) or an attribute of one, imported on use."""
    pytest.importorskip("transformers")
    module, _, name = path.rpartition(".")
    try:
        return importlib.import_module(f"transformers.{path}")
    except ImportError:
        return getattr(importlib.import_module(f"transformers.{module}" if module else "transformers"), name)
