"""How many CPUs this process may use: what thread pools are sized by.

`os.cpu_count()` counts the machine's CPUs; a container's CPU set or `taskset` may give the
process fewer, and a pool sized by the machine then queues for the CPUs it has.
"""

from __future__ import annotations

import os

from lbhash.checks import positive_int_env


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), or the machine's count where the
    system does not say."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def num_threads() -> int:
    """Worker threads for the evaluation kernels: LBHASH_NUM_THREADS, else `usable_cpus()`."""
    return positive_int_env("LBHASH_NUM_THREADS") or usable_cpus()
