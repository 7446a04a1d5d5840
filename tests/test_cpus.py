"""Thread pools are sized by the CPUs the process may use; LBHASH_NUM_THREADS overrides the kernels' and torch's."""

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


@pytest.fixture
def torch_pool():
    """torch's intra-op thread count, put back after the test (the tests set it process-wide)."""
    import torch

    before = torch.get_num_threads()
    pinned = list(lbhash.cpus._PINNED)
    yield torch
    lbhash.cpus._PINNED[:] = pinned
    torch.set_num_threads(before)


def test_torch_threads_default_to_half_the_usable_cpus(monkeypatch):
    """Half leaves a core to a competing process: a full pool on 2 shared cores ran 1.4-5.8x slower."""
    monkeypatch.delenv("LBHASH_NUM_THREADS", raising=False)
    for cpus, expected in (({0}, 1), ({0, 1}, 1), ({0, 1, 2, 3}, 2), (set(range(16)), 8)):
        monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid, c=cpus: c, raising=False)
        assert lbhash.cpus.torch_threads() == expected


def test_lbhash_num_threads_reaches_torch_when_a_backbone_or_model_is_built(monkeypatch, torch_pool):
    from lbhash.models import create_backbone

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # LBHASH_NUM_THREADS wins over it
    monkeypatch.setenv("LBHASH_NUM_THREADS", "3")
    torch_pool.set_num_threads(1)
    create_backbone("efficientnet_lite0")
    assert torch_pool.get_num_threads() == 3
    monkeypatch.delenv("LBHASH_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    from lbhash.models import ModelOptions
    from lbhash.train.builder import build_model

    build_model(ModelOptions(hidden=[]), 16, "features", 8)
    assert torch_pool.get_num_threads() == 2  # the default: half of 4


def test_omp_num_threads_alone_is_left_to_torch_and_a_pinned_share_is_kept(monkeypatch, torch_pool):
    monkeypatch.delenv("LBHASH_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch_pool.set_num_threads(1)
    assert lbhash.cpus.use_torch_threads() == 1
    assert torch_pool.get_num_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(lbhash.cpus.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    lbhash.cpus.use_torch_threads(pinned=3)  # a multi-process run's share
    assert lbhash.cpus.use_torch_threads() == 3 and torch_pool.get_num_threads() == 3
