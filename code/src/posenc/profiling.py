"""Measure the memory an operation needs, exactly and on any device: the peak bytes of live tensors.

Book: chapter 5 (``book/05_position_cost.ipynb``, the cost of position in the kernel). CPU PyTorch
keeps no allocator statistics, and process-level numbers (RSS) mix in the allocator's caching.
:func:`tensor_memory_peak` instead watches every tensor the operation creates (through a
``TorchDispatchMode``), adds a storage's size when it first appears and subtracts it when the last
tensor using it is freed. The peak is a property of the computation, not of the machine: the same
on every run. It does not see scratch memory that a kernel allocates internally and frees before
returning, nor a tensor built from Python data inside the operation (``torch.tensor([...])`` does
not go through the dispatcher, so it counts as an input): it measures what torch operators
allocate, which is what the book's comparisons are about.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["tensor_memory_peak"]


class _LiveTensorBytes(TorchDispatchMode):
    """Tracks the bytes of storages created inside the mode that are still referenced."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._users: dict[int, int] = {}  # storage address -> number of live tensors using it
        self._sizes: dict[int, int] = {}
        self._known = set()  # addresses of storages that existed before (inputs): never counted

    def _release(self, key: int) -> None:
        self._users[key] -= 1
        if self._users[key] == 0:
            self.live -= self._sizes.pop(key)
            del self._users[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for tensor in tree_leaves((args, kwargs)):
            if isinstance(tensor, torch.Tensor):
                key = tensor.untyped_storage().data_ptr()
                if key not in self._users:
                    self._known.add(key)
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or (key in self._known and key not in self._users):
                continue  # an input, or a view of one
            if key not in self._users:
                self._users[key] = 0
                self._sizes[key] = size
                self.live += size
                self.peak = max(self.peak, self.live)
            self._users[key] += 1
            weakref.finalize(tensor, self._release, key)
        return out


def tensor_memory_peak(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """Run ``fn(*args, **kwargs)``; return its result and the peak bytes of tensors it allocated.

    Tensors that exist before the call (inputs, parameters) are not counted; the result is
    counted while it is being built.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    mode = _LiveTensorBytes()
    with mode:
        result = fn(*args, **kwargs)
    return result, mode.peak
