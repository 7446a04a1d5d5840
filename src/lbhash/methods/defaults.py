"""Per-method training defaults, in one table (overridable from config and CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lbhash.methods.base import method_class


@dataclass(frozen=True)
class MethodDefaults:
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 0.0
    lr_step: int = 10          # epochs between learning-rate decays
    lr_gamma: float = 0.1      # decay factor
    epochs: int = 50
    batch_size: int = 64
    lbhash_mode: str = "add"   # how the _D objective combines with the method's loss
    constants: dict = field(default_factory=dict)


# The paper trains every method with Adam (lr 1e-3), batch 64, lr x0.1 every 10 epochs.
DEFAULTS: dict[str, MethodDefaults] = {
    "csq": MethodDefaults(lbhash_mode="replace", constants={"quantization": 1e-4}),
}


def method_defaults(name: str) -> MethodDefaults:
    method_class(name)  # unknown names fail with the list of methods
    return DEFAULTS.get(name.lower(), MethodDefaults())
