"""Tests of posenc.profiling.tensor_memory_peak: exact byte counts of live tensors."""

import pytest
import torch

from posenc import tensor_memory_peak


def test_counts_the_result():
    x = torch.randn(64, 32)
    result, peak = tensor_memory_peak(torch.matmul, x, x.T)
    assert peak == 64 * 64 * 4 and result.shape == (64, 64)


def test_counts_intermediates_alive_at_the_same_time():
    x = torch.randn(1, 2, 128, 16)

    def attention():
        scores = x @ x.transpose(-1, -2)  # 2 * 128 * 128 floats
        weights = scores.softmax(-1)  # same size, while scores is alive
        del scores
        return weights @ x

    _, peak = tensor_memory_peak(attention)
    assert peak == 2 * (2 * 128 * 128 * 4)


def test_freed_intermediates_do_not_add_up():
    x = torch.randn(1000)

    def chain():
        y = x
        for _ in range(10):
            y = y * 2  # each step frees the previous result
        return y

    _, peak = tensor_memory_peak(chain)
    assert peak == 2 * 1000 * 4  # never more than the old and the new vector


def test_views_and_inputs_are_free():
    x = torch.randn(100, 100)
    _, peak = tensor_memory_peak(lambda: (x[0], x.T, x.view(-1)))
    assert peak == 0


def test_rejects_non_callables():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        tensor_memory_peak(3)
