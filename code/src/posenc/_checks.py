"""Argument checks shared by posenc's public functions.

Every public entry point validates its inputs here, so that a user error raises a
``TypeError`` or ``ValueError`` that names the argument and the value it received,
instead of a silent wrong answer or a cryptic error from deep inside torch.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor


def check_tensor(name: str, value: object, *, ndim: int | None = None, floating: bool = False) -> Tensor:
    """Return ``value`` if it is a tensor of the required rank and kind, else raise."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {value.dtype}")
    return value


def check_integer_tensor(name: str, value: object) -> Tensor:
    """Return ``value`` if it is a tensor of an integer dtype (positions, relative distances), else raise."""
    check_tensor(name, value)
    if value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got {value.dtype}")
    return value


def exact_integer_limit(dtype: torch.dtype) -> int:
    """The largest integer below which every integer is exact in ``dtype`` (float64: 2**53, else 2**24).

    Past it a position or a distance is rounded, so two different ones can share an angle (RoPE) or a
    bias (ALiBi): callers refuse such inputs instead of answering silently wrong.
    """
    return 2**53 if dtype == torch.float64 else 2**24


def has_values(tensor: Tensor) -> bool:
    """True if ``tensor`` holds values that checks can read: non-empty and not on the meta device.

    A meta tensor has a shape but no data (it is used to trace shapes); value checks skip it, and the
    result of the computation is a meta tensor too, so nothing wrong can come out of it.
    """
    return tensor.numel() > 0 and not tensor.is_meta


# Every integer argument of posenc (lengths, positions, offsets, sizes, seeds) stays within
# [-2**62, 2**62]: it fits torch's int64 with room for the sum or difference of two of them, so no
# position arithmetic overflows and torch never sees a Python int it cannot convert.
MAX_INT = 2**62


def check_int(name: str, value: object, *, minimum: int | None = None, maximum: int = MAX_INT) -> int:
    """Return ``value`` as an ``int`` if it is an integer (not a bool) in ``[minimum, maximum]``, else raise.

    ``maximum`` defaults to :data:`MAX_INT` (``2**62``) and ``minimum=None`` means ``-MAX_INT``: an
    integer as large as ``2**70`` raises a ``ValueError`` naming ``name`` here instead of an
    ``OverflowError`` from torch (or a hang) further on.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {_power_of_two(maximum)}, got {value}")
    if value < -MAX_INT:
        raise ValueError(f"{name} must be >= -2**62, got {value}")
    return value


def _power_of_two(value: int) -> str:
    """``2**k`` for a power of two (readable in an error message), else the number."""
    return f"2**{value.bit_length() - 1}" if value > 1 and value & (value - 1) == 0 else str(value)


def check_exact_positions(name: str, positions: Tensor, dtype: torch.dtype) -> Tensor:
    """Return ``positions`` if each integer in it is exact in ``dtype`` (``|p| <=`` :func:`exact_integer_limit`).

    For functions that turn integer positions into floating-point angles (RoPE, the sinusoidal
    encoding): past the limit two positions round to one value and share an encoding, a silent
    wrong answer. A floating-point tensor is returned unchecked (its values are already what they
    are); signs are left to the caller's own checks.
    """
    if positions.is_floating_point() or not has_values(positions):
        return positions
    limit, largest = exact_integer_limit(dtype), max(-int(positions.min()), int(positions.max()))
    if largest > limit:
        raise ValueError(
            f"{name} must be <= {_power_of_two(limit)} = {limit} in absolute value to be exact in {dtype}, "
            f"got {largest}"
        )
    return positions


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise (so that ``causal="no"`` is not read as True)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
    return value


def float_dtype(name: str, dtype: object) -> torch.dtype:
    """Return ``dtype`` if it is a floating-point torch dtype, else raise."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


def check_real(name: str, value: object, *, greater_than: float | None = None) -> float:
    """Return ``value`` as a finite ``float`` if it is a real number (not a bool) > ``greater_than``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}")
    if greater_than is not None and not value > greater_than:
        raise ValueError(f"{name} must be > {greater_than:g}, got {value:g}")
    return value


def check_even_dim(name: str, value: object) -> int:
    """Return ``value`` if it is a positive even integer (a dimension made of 2-D pairs)."""
    value = check_int(name, value, minimum=1)
    if value % 2:
        raise ValueError(f"{name} must be even (dimensions come in (sin, cos) or rotation pairs), got {value}")
    return value
