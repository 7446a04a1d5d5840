"""Thread pools are sized by the CPUs the process may use, and LBHASH_NUM_THREADS overrides the kernels'."""

import pytest

import lbhash.cpus
from lbhash.cpus import num_threads, usable_cpus
from lbhash.errors import InputError


def test_usable_cpus_counts_the_affinity_not_the_machine(monkeypatch):
    monkeypatch.setattr(lbhash.cpus.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid: {3, 7}, raising=False)
    assert usable_cpus() == 2


def test_usable_cpus_falls_back_to_the_machine_count_without_affinity(monkeypatch):
    monkeypatch.delattr(lbhash.cpus.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(lbhash.cpus.os, "cpu_count", lambda: 6)
    assert usable_cpus() == 6
    monkeypatch.setattr(lbhash.cpus.os, "cpu_count", lambda: None)  # unknown
    assert usable_cpus() == 1


def test_num_threads_reads_the_environment_else_the_usable_cpus(monkeypatch):
    monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.delenv("LBHASH_NUM_THREADS", raising=False)
    assert num_threads() == 3
    monkeypatch.setenv("LBHASH_NUM_THREADS", "5")
    assert num_threads() == 5
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("LBHASH_NUM_THREADS", bad)
        with pytest.raises(InputError, match=f"LBHASH_NUM_THREADS must be a positive integer, got '?{bad}'?"):
            num_threads()
