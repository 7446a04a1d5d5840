"""Keeping the input features' neighbourhoods in the code: one loss, two uses (docs/methods.md, "Codes for classes
nobody trained on").

`neighbourhood_distillation(features, u)` is the mean over a batch's items of KL(teacher || student): the teacher a
sharp softmax of the features' cosine similarities, the student a softer one of the codes' ("tanh": relaxed Hamming, or
"cosine" of u, which does not saturate under CSQ_D). `distill` (registered here) is a label-free method whose whole loss
is this term; any other method adds it with `neighbourhood_weight`. The features are the head's inputs, detached.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
import torch.nn.functional as F

from lbhash.errors import InputError
from lbhash.methods.base import HashLoss, register_method
from lbhash.options import Options, option

# Chosen on a validation split (10% of the training items of each class, CIFAR-10 MobileNet
# features, protocol cifar10, 64 bits, seed 0; docs/methods.md, "Codes for classes nobody trained on").
TEACHER_TEMPERATURE = 0.03
STUDENT_TEMPERATURE = 0.5


Student = Literal["tanh", "cosine"]
STUDENTS = get_args(Student)


class NeighbourhoodOptions(Options):
    """The neighbourhood term that any method may add: its weight (0: off) and its student."""

    neighbourhood_weight: float = option(
        0.0, "Weight of the term keeping the input features' neighbourhoods in the code (any method, with or "
             "without _D; 0: off; docs/methods.md).", "a number >= 0", ge=0)
    neighbourhood_student: Student = option(
        "tanh", "The code similarity the neighbourhood term matches to the features': tanh(u_i) . tanh(u_j) / bits "
                "or cos(u_i, u_j) (docs/methods.md).", "one of tanh, cosine")


def neighbourhood_distillation(features: torch.Tensor, u: torch.Tensor,
                               teacher_temperature: float = TEACHER_TEMPERATURE,
                               student_temperature: float = STUDENT_TEMPERATURE,
                               student: str = "tanh") -> torch.Tensor:
    """mean_i KL(p_i || q_i) over a batch of at least 2 items, with j != i:
    p_ij = softmax_j(cos(f_i, f_j) / teacher_temperature),
    q_ij = softmax_j(s(u_i, u_j) / student_temperature), s = tanh(u_i) . tanh(u_j) / bits
    (student "tanh") or cos(u_i, u_j) ("cosine"). Gradients reach u only."""
    if student not in STUDENTS:
        raise InputError(f"neighbourhood_student must be one of {', '.join(STUDENTS)}, got {student!r}")
    if len(u) < 2:
        return u.sum() * 0.0  # no neighbour in the batch: nothing to keep
    f = F.normalize(features.detach().to(u.dtype), dim=1)
    if student == "tanh":
        h = torch.tanh(u)
        similarity = h @ h.T / (u.shape[1] * student_temperature)
    else:
        h = F.normalize(u, dim=1)
        similarity = h @ h.T / student_temperature
    others = ~torch.eye(len(u), dtype=torch.bool, device=u.device)
    teacher = (f @ f.T / teacher_temperature)[others].view(len(u), -1)
    student_logits = similarity[others].view(len(u), -1)
    log_p, log_q = F.log_softmax(teacher, dim=1), F.log_softmax(student_logits, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(1).mean()


def _check_temperature(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"method distill: {name} must be a positive number, got {value!r}")
    return float(value)


# Label-free: no labels to select an epoch on, so no validation split; 30 epochs of batches of
# 512 (a neighbour distribution needs neighbours in the batch) at a constant rate.
DISTILL_RECIPE = {"lr_step": 0, "epochs": 30, "batch_size": 512, "validation": 0.0, "eval_every": 10}


@register_method
class Distill(HashLoss):
    """L = neighbourhood_distillation(features, u): the code's in-batch neighbours, the features'."""

    name = "distill"
    display_name = "Distill"
    description = ("Label-free: the features' cosine neighbourhoods distilled into Hamming similarities "
                   "(KL of in-batch neighbour distributions)")
    needs_labels = False
    needs_features = True
    recipe = benchmark_recipe = recommended_recipe = DISTILL_RECIPE

    def __init__(self, bits: int, num_classes: int, num_train: int | None = None, centers=None,
                 multi_label: bool = False, teacher_temperature: float = TEACHER_TEMPERATURE,
                 student_temperature: float = STUDENT_TEMPERATURE):
        super().__init__(bits, num_classes, num_train, centers, multi_label)
        self.teacher_temperature = _check_temperature("teacher_temperature", teacher_temperature)
        self.student_temperature = _check_temperature("student_temperature", student_temperature)

    def compute_loss(self, u, labels, index, features=None):
        return {"distillation": neighbourhood_distillation(features, u, self.teacher_temperature,
                                                           self.student_temperature)}
