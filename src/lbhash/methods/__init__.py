"""Hashing methods: one loss module per method, a registry, and the _D wrapper.

Every module of this package is imported here, so a method registers itself by being a
module of the package (decorated with `@register_method`): adding one is one new file.
"""

import importlib
import pkgutil

from lbhash.methods.base import (HashLoss, LossOutput, available_methods, create_method, loss_output, method_class,
                                 register_method)
from lbhash.methods.options import PROFILES, MethodDefaults, method_defaults
from lbhash.methods.lower_bound import LowerBoundObjective, ObjectiveOptions

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "PROFILES", "HashLoss", "LossOutput", "LowerBoundObjective", "MethodDefaults", "ObjectiveOptions",
    "available_methods", "create_method", "loss_output", "method_class", "method_defaults",
    "register_method",
]
