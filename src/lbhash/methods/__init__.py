"""Hashing methods: one loss module per method, a registry, and the _D wrapper."""

# importing a method's module registers it
from lbhash.methods import csq, dbdh, dch, dsdh, greedyhash, hashnet  # noqa: F401
from lbhash.methods.base import (
    HashLoss,
    LossOutput,
    available_methods,
    create_method,
    loss_output,
    method_class,
    register_method,
)
from lbhash.methods.lower_bound import LowerBoundObjective

__all__ = [
    "HashLoss", "LossOutput", "LowerBoundObjective", "available_methods", "create_method",
    "loss_output", "method_class", "register_method",
]
