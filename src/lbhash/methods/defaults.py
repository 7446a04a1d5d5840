"""Per-method training defaults, in one table (overridable from config and CLI).

Two profiles:
- "paper" (the default): what the paper used for every method, "Adam with default
  configuration", lr 1e-3, batch 64, 100 epochs, lr x0.1 every 10 epochs (its App. G);
- "benchmark": the optimizer settings of the DeepHash-pytorch benchmark the paper took the
  baselines from (RMSprop lr 1e-5 for most methods, SGD for GreedyHash, 150-200 epochs).
The method constants (SPEC §5) are the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lbhash.methods.base import method_class

PROFILES = ("paper", "benchmark")


@dataclass(frozen=True)
class MethodDefaults:
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    lr_step: int = 10          # epochs between learning-rate decays (0: never)
    lr_gamma: float = 0.1      # decay factor
    epochs: int = 100
    batch_size: int = 64
    lbhash_mode: str = "add"   # how the _D objective combines with the method's loss
    constants: dict = field(default_factory=dict)


# Method constants and the benchmark's optimizer settings, method by method.
CONSTANTS: dict[str, dict] = {
    "hashnet": {"alpha": 0.1, "continuation_step": 20},
    "dbdh": {"alpha": 0.1, "p": 2},
    "dsdh": {"mu": 1.0, "nu": 1.0, "eta": 55.0, "dcc_iter": 10},
    "dch": {"gamma": 20.0, "quantization": 0.1},
    "greedyhash": {"quantization": 0.1},
    "csq": {"quantization": 1e-4},
}
_RMSPROP = MethodDefaults(optimizer="rmsprop", lr=1e-5, weight_decay=1e-5, lr_step=0, epochs=150,
                          batch_size=128)
BENCHMARK: dict[str, MethodDefaults] = {
    "hashnet": _RMSPROP,
    "dbdh": replace(_RMSPROP, lr_step=50),
    "dsdh": _RMSPROP,
    "dch": _RMSPROP,
    "greedyhash": MethodDefaults(optimizer="sgd", lr=1e-3, weight_decay=5e-4, lr_step=30,
                                 epochs=200, batch_size=64),
    "csq": MethodDefaults(optimizer="adam", lr=1e-3, lr_step=0, epochs=150, batch_size=128),
}
# CSQ_D replaces CSQ's BCE center loss with L_theta, as in the paper; others add L_theta.
LBHASH_MODE = {"csq": "replace"}


def method_defaults(name: str, profile: str = "paper") -> MethodDefaults:
    """The defaults of a registered method under a profile ("paper" or "benchmark")."""
    method_class(name)  # unknown names fail with the list of methods
    if profile not in PROFILES:
        raise ValueError(f"defaults profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    key = name.lower()
    base = BENCHMARK.get(key, MethodDefaults()) if profile == "benchmark" else MethodDefaults()
    return replace(base, constants=dict(CONSTANTS.get(key, {})),
                   lbhash_mode=LBHASH_MODE.get(key, "add"))
