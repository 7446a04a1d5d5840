"""The surrogate posterior estimator P_pi (paper Sec. 5, App. E).

The h real outputs l of a hash model are split into u = h / s blocks of s bits. For each
block an MLP `Linear(s, hidden) -> SiLU -> Dropout -> Linear(hidden, 2^s)` gives the logits of
a categorical distribution over the block's 2^s sign patterns. All u blocks run as one batched
computation (stacked weights, `torch.baddbmm`). The joint probability of a full code is the
product of its blocks' probabilities.

- L_pi (Eq. 5) trains pi: cross-entropy of P_pi(l.detach()) against the pattern of bin(l).
- L_theta (Eq. 6-7) trains the hash model: cross-entropy of P_pi(l) against the pattern of the
  sample's class center, with pi frozen (its gradient reaches l only).
Both losses sum over blocks and average over the batch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from lbhash.errors import InputError


class BlockSurrogate(nn.Module):
    """P_pi for codes of `bits` bits in blocks of `block_size` bits."""

    def __init__(self, bits: int, block_size: int = 8, hidden: int = 256, dropout: float = 0.5):
        super().__init__()
        if block_size < 1 or block_size > 16:
            raise InputError(f"block size must be between 1 and 16 bits, got {block_size}")
        if bits < 1 or bits % block_size:
            raise InputError(f"bits={bits} is not divisible by the block size {block_size}")
        if not 0 <= dropout < 1:
            raise InputError(f"surrogate dropout must be in [0, 1), got {dropout}")
        self.bits, self.block_size, self.hidden, self.dropout = bits, block_size, hidden, dropout
        self.blocks = bits // block_size
        self.patterns = 2 ** block_size
        u, s, k = self.blocks, block_size, self.patterns
        self.w1 = nn.Parameter(torch.empty(u, s, hidden))
        self.b1 = nn.Parameter(torch.empty(u, 1, hidden))
        self.w2 = nn.Parameter(torch.empty(u, hidden, k))
        self.b2 = nn.Parameter(torch.empty(u, 1, k))
        self.register_buffer("powers", 2 ** torch.arange(s), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's default initialisation, block by block
        for w, b in ((self.w1, self.b1), (self.w2, self.b2)):
            bound = 1.0 / math.sqrt(w.shape[1])
            nn.init.uniform_(w, -bound, bound)
            nn.init.uniform_(b, -bound, bound)

    def extra_repr(self) -> str:
        return (f"bits={self.bits}, blocks={self.blocks}x{self.block_size}, hidden={self.hidden}, "
                f"dropout={self.dropout}")

    def logits(self, l: torch.Tensor, frozen: bool = False, dropout: bool = True) -> torch.Tensor:
        """Block logits (B, u, 2^s) of real outputs l (B, bits).

        frozen: use detached parameters, so that gradients reach l but not pi.
        dropout: apply dropout when the module is in training mode.
        """
        return self._block_logits(l, frozen, dropout).transpose(0, 1)

    def _block_logits(self, l: torch.Tensor, frozen: bool, dropout: bool) -> torch.Tensor:
        # Block-major (u, B, 2^s) and contiguous: the losses below use it without copies.
        if l.dim() != 2 or l.shape[1] != self.bits:
            raise InputError(f"surrogate expects outputs of shape (batch, {self.bits}), got {tuple(l.shape)}")
        params = (self.w1, self.b1, self.w2, self.b2)
        if frozen:
            params = tuple(p.detach() for p in params)
        w1, b1, w2, b2 = params
        x = l.reshape(-1, self.blocks, self.block_size).transpose(0, 1)  # (u, B, s)
        h = F.silu(torch.baddbmm(b1, x, w1.to(x.dtype)))
        if self.training and dropout and self.dropout > 0:
            h = _dropout(h, self.dropout)
        return torch.baddbmm(b2, h, w2.to(h.dtype))

    def pattern_index(self, x: torch.Tensor) -> torch.Tensor:
        """Pattern of each block (B, u): sum_k [x_k > 0] * 2^k over the block's bits k."""
        blocks = (x.reshape(x.shape[0], self.blocks, self.block_size) > 0).long()
        return (blocks * self.powers).sum(-1)

    def loss_pi(self, l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """L_pi and the pattern accuracy (share of blocks whose most likely pattern is right).

        bin(l) maps 0 to +1, so the target pattern uses l >= 0.
        """
        l = l.detach()
        logits = self._block_logits(l, frozen=False, dropout=True)  # (u, B, K)
        target = self.pattern_index(l >= 0).t()                      # (u, B)
        loss = F.cross_entropy(logits.view(-1, self.patterns), target.reshape(-1),
                               reduction="sum") / l.shape[0]
        # the target is the most likely pattern iff its logit reaches the maximum (faster than argmax)
        detached = logits.detach()
        accuracy = (detached.gather(2, target.unsqueeze(2)).squeeze(2) >= detached.amax(-1)).float().mean()
        return loss, accuracy

    def pattern_nll(self, l: torch.Tensor, patterns: torch.Tensor, frozen: bool = True,
                    dropout: bool = True) -> torch.Tensor:
        """-log P_pi(code | l) summed over blocks, for every candidate code: (B, P).

        patterns: (P, u) block pattern indices of the candidate codes (e.g. class centers).
        """
        logp = F.log_softmax(self._block_logits(l, frozen, dropout).float(), dim=-1)  # (u, B, K)
        index = patterns.t().unsqueeze(1).expand(-1, l.shape[0], -1)          # (u, B, P)
        return -logp.gather(2, index).sum(0)

    def loss_theta(self, l: torch.Tensor, target_patterns: torch.Tensor, labels: torch.Tensor,
                   dropout: bool = True) -> torch.Tensor:
        """L_theta against the centers of each sample's positive labels, averaged over them.

        target_patterns: (C, u) pattern indices of the C class centers; labels: (B, C) 0/1.
        pi is frozen: the gradient reaches l only.
        """
        labels = labels.to(torch.float32)
        positives = labels.sum(1)
        if bool((positives == 0).any()):
            row = int(torch.nonzero(positives == 0)[0, 0])
            raise InputError(f"L_theta needs at least one label per sample; batch row {row} has none")
        nll = self.pattern_nll(l, target_patterns, frozen=True, dropout=dropout)
        return ((nll * labels).sum(1) / positives).mean()

    @torch.no_grad()
    def block_probs(self, l: torch.Tensor) -> torch.Tensor:
        """Estimated block distributions (B, u, 2^s) in float64, dropout off."""
        return F.softmax(self.logits(l, dropout=False).double(), dim=-1)


def _dropout(h: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout; on the CPU from 16 random bits per element.

    torch's CPU dropout draws one random number per element (about 2 ms for a 64-bit
    surrogate's batch of 64, more than the surrogate's matmuls). Here each 64-bit draw gives
    four 16-bit uniforms, so the keep probability is (1 - p) rounded to a multiple of 1/65536.
    """
    if h.device.type != "cpu":
        return F.dropout(h, p, training=True)
    n = h.numel()
    words = torch.randint(-2**63, 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64)
    uniform16 = words.view(torch.int16)[:n].view(h.shape)  # uniform over [-32768, 32767]
    keep = round(65536 * (1 - p))
    return h * ((uniform16 < keep - 32768) * (65536 / keep))


def joint_distribution(block_probs: np.ndarray) -> np.ndarray:
    """Joint distribution over all 2^(u*s) codes from block distributions (u, 2^s).

    The full pattern index is sum_j idx_j * 2^(s*j) (block j holds bits j*s .. j*s+s-1),
    so the joint is the Kronecker product with the last block outermost.
    """
    joint = np.ones(1)
    for probs in block_probs:
        joint = np.outer(probs, joint).ravel()
    return joint


def pattern_indices(signs: np.ndarray) -> np.ndarray:
    """Full pattern index sum_k [x_k > 0] 2^k of each +/-1 code (n, bits), bits <= 62."""
    bits = signs.shape[1]
    return ((signs > 0).astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(1)


def marginal_product(signs: np.ndarray) -> np.ndarray:
    """The naive estimate: product of per-bit marginal frequencies, over all 2^bits codes."""
    p_plus = (signs > 0).mean(0)
    return joint_distribution(np.stack([1 - p_plus, p_plus], axis=1))
