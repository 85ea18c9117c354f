"""Benchmark: T5's relative bias and Shaw et al.'s attention (book chapter 4, book/04_relative.ipynb).

1. Time to build T5's (h, L, L) relative bias at L = 2048, h = 12, float32, one thread:
   posenc.T5RelativeBias (Toeplitz: buckets for the 2L - 1 distinct distances only) against
   Hugging Face transformers' T5Attention.compute_bias (buckets for all L * L pairs), checked to
   give the same values. Also timed: the floor of any implementation that returns a fresh
   (h, L, L) tensor, writing zeros into one. Target: posenc at most 0.3x transformers' time.

   Both run twice, in two processes: with glibc's default malloc, where every fresh 200 MB
   output is mapped from the kernel page by page and those page faults dominate everyone's
   time (the zero-fill floor is already about 0.3x transformers), and with
   GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which lets glibc back large allocations with
   transparent huge pages, so the figures show the computation itself.
2. Peak memory of Shaw et al.'s attention, direct (materialises (L, L, d) tensors) against the
   memory-efficient version, counted exactly by posenc.tensor_memory_peak (machine-independent).

Run: .venv/bin/python benchmarks/relative_bias.py [--record]   (--record writes benchmarks/results/ for the book)
"""

from __future__ import annotations

import json
import sys

import torch
import torch.utils.benchmark as benchmark
from _child import run_child
from _record import record

T5_TARGET = 0.3
LENGTH, HEADS = 2048, 12
CONFIGS = {"default malloc": None, "huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1)": "glibc.malloc.hugetlb=1"}


def t5_times() -> dict[str, float]:
    """Median seconds of each way to build the bias, in this process."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    from posenc import T5RelativeBias

    config = T5Config(num_heads=HEADS, d_model=64 * HEADS, d_kv=64)
    reference = T5Attention(config, has_relative_attention_bias=True).eval()
    ours = T5RelativeBias(HEADS).eval()
    with torch.no_grad():
        ours.weight.copy_(reference.relative_attention_bias.weight)
        assert torch.equal(ours(LENGTH, LENGTH), reference.compute_bias(LENGTH, LENGTH)[0]), "values differ"
    statements = {
        "transformers": "reference.compute_bias(L, L)",
        "posenc": "ours(L, L)",
        "zero-fill floor": "torch.empty(H, L, L).zero_()",
    }
    times = {}
    for name, stmt in statements.items():
        timer = benchmark.Timer(
            stmt=f"with torch.no_grad(): {stmt}",
            globals={"torch": torch, "reference": reference, "ours": ours, "L": LENGTH, "H": HEADS},
            num_threads=1,
        )
        times[name] = timer.blocked_autorange(min_run_time=2.0).median
    return times


def shaw_memory(heads: int = 4, max_relative: int = 16) -> None:
    from posenc import shaw_attention, shaw_attention_naive, tensor_memory_peak

    print(f"\nShaw et al. attention: peak bytes of live tensors (batch 1, h = {heads}, k = {max_relative})")
    print(f"{'L':>6} {'d':>4} {'direct':>12} {'efficient':>12} {'direct / efficient':>19}")
    for length, dim in ((256, 64), (512, 64), (1024, 64), (1024, 128)):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, heads, length, dim, generator=gen) for _ in range(3))
        rel_k, rel_v = (torch.randn(2 * max_relative + 1, dim, generator=gen) for _ in range(2))
        with torch.no_grad():
            (out_a, _), direct = tensor_memory_peak(shaw_attention_naive, q, k, v, rel_k, rel_v)
            (out_b, _), efficient = tensor_memory_peak(shaw_attention, q, k, v, rel_k, rel_v)
        torch.testing.assert_close(out_b, out_a, rtol=1e-4, atol=1e-5)
        print(
            f"{length:>6} {dim:>4} {direct / 2**20:>8.1f} MiB {efficient / 2**20:>8.1f} MiB {direct / efficient:>19.1f}"
        )


def main(record_run: bool = False) -> int:
    print(f"T5 relative bias: h = {HEADS}, L = {LENGTH}, float32, 1 thread; median ms (ratio to transformers)")
    ratios, floor_ratios, table = [], [], []
    for label, tunables in CONFIGS.items():
        times = run_child(__file__, "--t5-worker", tunables)
        base = times["transformers"]
        cells = "  ".join(f"{name} {t * 1e3:7.1f} ({t / base:.3f})" for name, t in times.items())
        print(f"  {label}:\n    {cells}")
        ratios.append(times["posenc"] / base)
        floor_ratios.append(times["posenc"] / times["zero-fill floor"])
        short = "huge pages" if tunables else "default"  # the recorded table stays narrow enough for a page
        table += [[short, name, f"{t * 1e3:.1f}", f"{t / base:.3f}"] for name, t in times.items()]
    if record_run:
        record("relative_bias", ["malloc", "implementation", "ms", "÷ transformers"], table)
    shaw_memory()
    default, huge = ratios
    print(
        f"\nT5 bias, posenc / transformers: {default:.3f} with default malloc, {huge:.3f} with huge pages "
        f"(target <= {T5_TARGET}); posenc / zero-fill floor: {floor_ratios[0]:.2f}, {floor_ratios[1]:.2f}"
    )
    if default > T5_TARGET:
        print(
            "With default malloc the page faults of the fresh output bound every implementation: "
            f"even the zero-fill floor is {default / floor_ratios[0]:.2f}x transformers' time."
        )
    # The target is judged where the computation, not the kernel's page faults, is measured;
    # with default malloc posenc must stay close to the floor that no implementation can beat.
    return 0 if huge <= T5_TARGET and floor_ratios[0] <= 1.6 else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--t5-worker"]:
        print(json.dumps(t5_times()))
    else:
        sys.exit(main(record_run=sys.argv[1:] == ["--record"]))
