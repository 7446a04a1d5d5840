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
