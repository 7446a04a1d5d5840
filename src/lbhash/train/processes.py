"""The processes of a run: this process's rank before any process group exists, Lightning Fabric on
one process or several, an encoding's processes (this one alone needs no Lightning), the clean end
of a process group, and the check that a GPU accelerator has a GPU.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

from lbhash.checks import positive_int_env
from lbhash.cpus import usable_cpus, use_torch_threads
from lbhash.errors import InputError


def process_rank() -> int:
    """This process's global rank as launchers announce it, before any process group exists
    (torchrun sets RANK; Lightning's launcher sets LOCAL_RANK and NODE_RANK in its children)."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    return int(os.environ.get("NODE_RANK", 0)) * max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1))) + local


def make_fabric(accelerator: str, devices: int, precision: str, loggers=None):
    from lightning_fabric import Fabric

    logging.getLogger("lightning_fabric").setLevel(logging.WARNING)
    strategy = "auto"
    if devices > 1:
        if "RANK" not in os.environ:
            _gloo_over_loopback()
        from lightning_fabric.strategies import DDPStrategy

        strategy = DDPStrategy(timeout=process_group_timeout())
    fabric = Fabric(accelerator=accelerator, devices=devices, precision=precision, strategy=strategy,
                    loggers=loggers)
    fabric.launch()  # starts the other processes of a multi-device run (no-op under torchrun)
    if fabric.world_size > 1 and fabric.device.type == "cpu":
        # processes share the CPUs: one full intra-op pool each would oversubscribe them
        use_torch_threads(pinned=positive_int_env("LBHASH_NUM_THREADS") or max(1, usable_cpus() // fabric.world_size))
    return fabric


@dataclass(frozen=True)
class OneProcess:
    """This process alone, with what `encode_sharded` (and `embed_sharded`) and
    `leave_process_group` read of a Fabric: one device needs no process group, and importing
    Lightning takes longer than all the rest of `lbhash encode` (docs/results/benchmarks.md#start-up)."""
    device: torch.device
    world_size: int = 1
    global_rank: int = 0
    is_global_zero: bool = True


def encoding_processes(accelerator: str, devices: int):
    """This process alone (`OneProcess`) on one device outside a launcher, else Fabric's (`make_fabric`)."""
    if devices == 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return OneProcess(torch.device("cuda", 0) if accelerator == "gpu" else torch.device("cpu"))
    return make_fabric(accelerator, devices, "32-true")


def process_group_timeout():
    """How long a collective waits for the other ranks before it fails with its stack:
    LBHASH_PROCESS_GROUP_TIMEOUT seconds, else torch's default of 30 minutes (rank 0 may spend
    minutes alone, evaluating, while the others wait at a barrier). Tests set a minute."""
    from datetime import timedelta

    from lbhash.checks import positive_int_env

    return timedelta(seconds=positive_int_env("LBHASH_PROCESS_GROUP_TIMEOUT", "seconds") or 30 * 60)


def _gloo_over_loopback() -> None:
    """Processes that Lightning starts on this machine talk over the loopback interface: gloo
    otherwise binds the address the host name resolves to, which on a misconfigured host (or a
    sandbox) may accept a bind and never a connection. A GLOO_SOCKET_IFNAME set by the user wins;
    torchrun launches (RANK set, possibly several machines) are left alone."""
    import socket

    if "GLOO_SOCKET_IFNAME" in os.environ or not hasattr(socket, "if_nameindex"):
        return
    loopback = [name for _, name in socket.if_nameindex() if name in ("lo", "lo0")]
    if loopback:
        os.environ["GLOO_SOCKET_IFNAME"] = loopback[0]  # inherited by the spawned ranks


def leave_process_group(fabric) -> None:
    """End a multi-process run cleanly. A gloo group still alive when the interpreter exits
    can abort the process (its worker threads outlive Python), so every rank meets here and
    destroys the group."""
    import torch.distributed as dist

    if fabric.world_size > 1 and dist.is_available() and dist.is_initialized():
        fabric.barrier()
        dist.destroy_process_group()


def check_accelerator(accelerator: str) -> None:
    """A GPU accelerator needs a GPU torch can use."""
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise InputError(f"--accelerator {accelerator}: no GPU is available to torch (torch.cuda.is_available() "
                         "is False); use --accelerator cpu")
