"""How many CPUs this process may use: what thread pools are sized by.

`os.cpu_count()` counts the machine's CPUs; a container's CPU set or `taskset` may give the
process fewer, and a pool sized by the machine then queues for the CPUs it has.
"""

from __future__ import annotations

import os

from lbhash.checks import positive_int_env


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), or the machine's count where the system does not say."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def num_threads() -> int:
    """Worker threads for the evaluation kernels: LBHASH_NUM_THREADS, else `usable_cpus()`."""
    return positive_int_env("LBHASH_NUM_THREADS") or usable_cpus()


# torch's intra-op threads when LBHASH_NUM_THREADS is unset. On 2 cores shared with other work,
# a pool of 2 threads ran EfficientNet-Lite0 extraction 1.4-5.8x slower than a pool of 1 (its OpenMP
# barriers wait for whichever thread the scheduler parked; issue 69 saw 5-20x), and 1 thread kept
# within 2x of its own rate beside one more CPU-bound process (benchmarks/bench_threads.py,
# docs/results/benchmarks.md). Half the usable CPUs leaves a core for a competitor; LBHASH_NUM_THREADS
# gives an idle machine all of them.
def default_torch_threads() -> int:
    return max(1, usable_cpus() // 2)


def torch_threads() -> int:
    """torch's intra-op threads: LBHASH_NUM_THREADS, else `default_torch_threads()`."""
    return positive_int_env("LBHASH_NUM_THREADS") or default_torch_threads()


_PINNED: list[int] = []  # the count a multi-process run gave each process, which use_torch_threads keeps


def use_torch_threads(pinned: int | None = None) -> int:
    """Set torch's intra-op threads to `torch_threads()` (where the backbone and the hash model are
    built), unless OMP_NUM_THREADS set them and LBHASH_NUM_THREADS does not; return the count in use.
    pinned: this process's share of the CPUs in a multi-process run, kept by every later call."""
    import torch  # here: the bottom layer imports no torch at import time

    if pinned is not None:
        _PINNED[:] = [pinned]
    if _PINNED:
        threads = _PINNED[0]
    elif os.environ.get("LBHASH_NUM_THREADS") or not os.environ.get("OMP_NUM_THREADS"):
        threads = torch_threads()
    else:
        threads = torch.get_num_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def bf16_native(device: str = "cpu") -> bool:
    """Whether `device` computes bfloat16 natively: on the CPU AVX512-BF16 or AMX tiles (oneDNN's
    bf16 convolutions and matmuls then run 2-3x faster than float32; without them torch emulates
    bf16 and it is slower than float32), on a GPU torch's own check."""
    import torch  # here: lbhash.cpus sizes the metrics' thread pools, which run without torch

    if str(device).startswith(("cuda", "gpu")):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    try:  # private checks of torch.cpu (torch >= 2.1); absent: assume no native bf16
        return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())
    except AttributeError:
        return False
