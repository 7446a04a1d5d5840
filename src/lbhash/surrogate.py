"""The surrogate posterior estimator P_pi (paper Sec. 5, App. E).

The h real outputs of a hash model are split into u = h / s blocks of s bits; for each block an MLP
`Linear(s, hidden) -> SiLU -> Dropout -> Linear(hidden, 2^s)` gives the logits over its 2^s sign patterns, all blocks
in one batched computation (`torch.baddbmm`). L_pi (Eq. 5) trains pi on the detached codes, L_theta (Eq. 6-7) trains
the hash model toward the class centers with pi frozen. `fused_losses` computes both from one forward pass, with three
large batched matmuls in its backward against five for `loss_pi` and `loss_theta` apart.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lbhash.errors import InputError
from lbhash.options import Options, option


REDUCTIONS = ("sum", "mean")
MULTILABEL_THETA = ("sum", "mean")  # L_theta over a sample's positive labels: the paper sums


class SurrogateOptions(Options):
    """P_pi's shape (blocks, hidden width, dropout) and its optimizer."""

    surrogate_lr: float = option(1e-3, "Learning rate of the surrogate P_pi (eta_1).", "a positive number", gt=0)
    surrogate_weight_decay: float | None = option(None, "Weight decay of the surrogate's optimizer.",
                                                  "a number >= 0", shown="the method's", ge=0)
    block_size: int = option(8, "Bits per surrogate block.", "an integer from 1 to 16", ge=1, le=16)
    surrogate_hidden: int = option(256, "Hidden width of each block's MLP.", "a positive integer", ge=1)
    surrogate_dropout: float = option(0.5, "Dropout in the surrogate's MLPs.", "a number in [0, 1)", ge=0, lt=1)


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
        """Block logits (B, u, 2^s) of real outputs l (B, bits); `frozen`: detached parameters (gradients
        reach l, not pi); `dropout`: dropout in training mode."""
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
            h = h * _dropout_mask(h.shape, self.dropout, h.device, h.dtype)
        return torch.baddbmm(b2, h, w2.to(h.dtype))

    def pattern_index(self, x: torch.Tensor) -> torch.Tensor:
        """Pattern of each block (B, u): sum_k [x_k > 0] * 2^k over the block's bits k."""
        blocks = (x.reshape(x.shape[0], self.blocks, self.block_size) > 0).long()
        return (blocks * self.powers).sum(-1)

    def loss_pi(self, l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """L_pi and the pattern accuracy (share of blocks whose most likely pattern is right); bin(l) maps
        0 to +1, so the target pattern uses l >= 0."""
        l = l.detach()
        logits = self._block_logits(l, frozen=False, dropout=True)  # (u, B, K)
        target = self.pattern_index(l >= 0).t()                      # (u, B)
        loss = F.cross_entropy(logits.view(-1, self.patterns), target.reshape(-1), reduction="sum") / l.shape[0]
        # the target is the most likely pattern iff its logit reaches the maximum (faster than argmax)
        detached = logits.detach()
        accuracy = (detached.gather(2, target.unsqueeze(2)).squeeze(2) >= detached.amax(-1)).float().mean()
        return loss, accuracy

    def pattern_nll(self, l: torch.Tensor, patterns: torch.Tensor, frozen: bool = True,
                    dropout: bool = True) -> torch.Tensor:
        """-log P_pi(code | l) summed over blocks (B, P), for the candidate codes whose block patterns
        are `patterns` (P, u), e.g. the class centers'."""
        logp = F.log_softmax(self._block_logits(l, frozen, dropout).float(), dim=-1)  # (u, B, K)
        index = patterns.t().unsqueeze(1).expand(-1, l.shape[0], -1)          # (u, B, P)
        return -logp.gather(2, index).sum(0)

    def loss_theta(self, l: torch.Tensor, target_patterns: torch.Tensor, labels: torch.Tensor,
                   dropout: bool = True, reduction: str = "sum", multilabel: str = "sum") -> torch.Tensor:
        """L_theta against the target codes of each sample, weighted with the sample's weights.

        target_patterns: (P, u) pattern indices of P candidate codes (e.g. the class centers); labels: (B, P)
        non-negative weights, e.g. 0/1 positive labels. multilabel: "sum" of the per-center losses over a sample's
        positive labels (the paper: "the sum of multiple losses") or their "mean" (each row normalised to sum 1).
        reduction: "sum" over blocks (the paper's reading) or "mean". pi is frozen: the gradient reaches l only.
        """
        weights = theta_weights(labels, multilabel)
        nll = self.pattern_nll(l, target_patterns, frozen=True, dropout=dropout)
        return (nll * weights).sum(1).mean() * _block_scale(self.blocks, reduction)

    def fused_losses(self, l: torch.Tensor, target_patterns: torch.Tensor, labels: torch.Tensor,
                     reduction: str = "sum", multilabel: str = "sum"
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(L_pi, L_theta, pattern accuracy) from one forward pass of P_pi: what `loss_pi` and `loss_theta`
        give with one shared dropout mask, L_pi's gradient reaching pi only and L_theta's l only."""
        if l.dim() != 2 or l.shape[1] != self.bits:
            raise InputError(f"surrogate expects outputs of shape (batch, {self.bits}), got {tuple(l.shape)}")
        weights = theta_weights(labels, multilabel)
        with torch.no_grad():
            target = self.pattern_index(l >= 0).t().contiguous()        # (u, B)
            mask = None
            if self.training and self.dropout > 0:
                mask = _dropout_mask((self.blocks, l.shape[0], self.hidden), self.dropout, l.device)
        return _FusedSurrogate.apply(l, self.w1, self.b1, self.w2, self.b2, target, target_patterns, weights, mask,
                                     _block_scale(self.blocks, reduction))

    @torch.no_grad()
    def block_probs(self, l: torch.Tensor) -> torch.Tensor:
        """Estimated block distributions (B, u, 2^s) in float64, dropout off."""
        return F.softmax(self.logits(l, dropout=False).double(), dim=-1)


def theta_weights(labels: torch.Tensor, multilabel: str = "sum") -> torch.Tensor:
    """The per-candidate weights of L_theta: the rows of non-negative target weights as they are ("sum": one loss per
    positive label, summed) or normalised to sum 1 ("mean"). An empty row is an error."""
    if multilabel not in MULTILABEL_THETA:
        raise InputError(f"multilabel_theta must be one of {', '.join(MULTILABEL_THETA)}, got {multilabel!r}")
    labels = labels.to(torch.float32)
    positives = labels.sum(1)
    if bool((positives == 0).any()):
        row = int(torch.nonzero(positives == 0)[0, 0])
        raise InputError(f"L_theta needs at least one label per sample; batch row {row} has none")
    return labels if multilabel == "sum" else labels / positives[:, None]


def _block_scale(blocks: int, reduction: str) -> float:
    if reduction not in REDUCTIONS:
        raise InputError(f"L_theta reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return 1.0 if reduction == "sum" else 1.0 / blocks


class _FusedSurrogate(torch.autograd.Function):
    """L_pi and L_theta of one forward pass; see BlockSurrogate.fused_losses.

    Inputs: l (B, h); the parameters w1 (u, s, H), b1 (u, 1, H), w2 (u, H, K), b2 (u, 1, K); the L_pi targets (u, B)
    (patterns of bin(l)); the L_theta candidates (P, u) and weights (B, P) (rows of any positive sum); the dropout mask
    (u, B, H) or None; the block scale of L_theta. Computed in float32 outside autocast.
    """

    @staticmethod
    def forward(ctx, l, w1, b1, w2, b2, target, patterns, weights, mask, scale):
        with torch.autocast(l.device.type, enabled=False):
            u, s = w1.shape[0], w1.shape[1]
            batch = l.shape[0]
            dtype = torch.promote_types(l.dtype, torch.float32)           # float32, or float64
            x = l.to(dtype).reshape(batch, u, s).transpose(0, 1)          # (u, B, s)
            a1 = torch.baddbmm(b1.to(dtype), x, w1.to(dtype))             # (u, B, H)
            hidden = F.silu(a1)
            if mask is not None:
                mask = mask.to(dtype)
                hidden.mul_(mask)
            logp = F.log_softmax(torch.baddbmm(b2.to(dtype), hidden, w2.to(dtype)), dim=-1)  # (u, B, K)
            weights = weights.to(dtype)
            target_logp = logp.gather(2, target.unsqueeze(2)).squeeze(2)  # (u, B)
            loss_pi = -target_logp.sum() / batch
            index = patterns.t().unsqueeze(1).expand(-1, batch, -1)       # (u, B, P)
            nll = -logp.gather(2, index).sum(0)                           # (B, P)
            loss_theta = (nll * weights).sum(1).mean() * scale
            accuracy = (target_logp >= logp.amax(-1)).float().mean()
        ctx.save_for_backward(x, a1, hidden, w1, w2, logp, target, patterns, weights, mask)
        ctx.scale, ctx.l_dtype = scale, l.dtype
        ctx.mark_non_differentiable(accuracy)
        ctx.set_materialize_grads(False)  # an unused loss gives None: its half of the work is skipped
        return loss_pi, loss_theta, accuracy

    @staticmethod
    def backward(ctx, grad_pi, grad_theta, _):
        # Passes over the (u, B, H) and (u, B, K) blocks are few on purpose: each costs about
        # as much as a small matmul on the CPU. Scalar factors go on the small results.
        x, a1, hidden, w1, w2, logp, target, patterns, weights, mask = ctx.saved_tensors
        u, batch = target.shape
        grads = [None] * 10
        with torch.autocast(x.device.type, enabled=False):
            w2 = w2.to(x.dtype)
            p = logp.exp()
            p_rows = torch.bmm(p, w2.transpose(1, 2))                     # (u, B, H): softmax @ W2^T
            # silu'(a1), times the dropout mask, in one pass
            dsilu = torch.ops.aten.silu_backward(torch.ones_like(a1) if mask is None else mask, a1)
            blocks = torch.arange(u, device=x.device).unsqueeze(1)
            if grad_pi is not None and ctx.needs_input_grad[1]:   # L_pi -> pi: d/dz = p - onehot(target)
                coef = grad_pi / batch
                gz = p.mul_(coef).scatter_add_(2, target.unsqueeze(2), (-coef).expand(u, batch, 1).to(p.dtype))
                da1 = (p_rows - w2[blocks, :, target]).mul_(dsilu)        # W2[:, target] of each row
                grads[1] = (torch.bmm(x.transpose(1, 2), da1) * coef).to(w1.dtype)
                grads[2] = (da1.sum(1, keepdim=True) * coef).to(w1.dtype)
                grads[3] = torch.bmm(hidden.transpose(1, 2), gz).to(w2.dtype)
                grads[4] = gz.sum(1, keepdim=True).to(w2.dtype)
            if grad_theta is not None and ctx.needs_input_grad[0]:   # L_theta -> l: d/dz = (sum w) p - sum w onehot
                coef = grad_theta * ctx.scale / batch
                candidate_rows = w2[blocks, :, patterns.t()]              # (u, P, H)
                total = weights.sum(1).view(1, batch, 1)                  # 1 for "mean" weights
                da1 = torch.baddbmm(p_rows * total, weights.expand(u, -1, -1), candidate_rows, alpha=-1)
                dx = torch.bmm(da1.mul_(dsilu), w1.to(x.dtype).transpose(1, 2)) * coef   # (u, B, s)
                grads[0] = dx.transpose(0, 1).reshape(batch, -1).to(ctx.l_dtype)
        return tuple(grads)


def _dropout_mask(shape: tuple[int, ...], p: float, device: torch.device, dtype: torch.dtype = torch.float32
                  ) -> torch.Tensor:
    """Dropout's multipliers (0, or 1 / keep probability); on the CPU from few random bits.

    torch's CPU dropout draws one random number per element (about 2 ms for a 64-bit surrogate's batch of 64, more than
    the surrogate's matmuls). Here each element takes the fewest of 1, 2, 4, 8 or 16 random bits that give its keep
    probability exactly (one bit at the default p = 0.5), else 16 bits with (1 - p) rounded to a multiple of 1/65536;
    below 16 bits each random byte becomes its elements' multipliers through a 256-row table.
    """
    if device.type != "cpu":
        return F.dropout(torch.ones(shape, device=device, dtype=dtype), p, training=True)
    bits = next((b for b in (1, 2, 4, 8) if ((1 - p) * 2 ** b).is_integer()), 16)
    keep = round(2 ** bits * (1 - p))
    n = math.prod(shape)
    words = torch.randint(-2**63, 2**63 - 1, (-(-n * bits // 64),), dtype=torch.int64)
    if bits == 16:
        uniform16 = words.view(torch.int16)[:n]  # uniform over [-32768, 32767]
        return (uniform16 < keep - 32768).to(dtype).mul_(65536 / keep).view(shape)
    random_bytes = words.view(torch.uint8)[:-(-n * bits // 8)]
    return _mask_table(bits, keep, dtype).index_select(0, random_bytes.int()).view(-1)[:n].view(shape)


@functools.lru_cache(maxsize=16)
def _mask_table(bits: int, keep: int, dtype: torch.dtype) -> torch.Tensor:
    """(256, 8 // bits): the multipliers of the fields of each byte value, low bits first."""
    fields = (torch.arange(256).unsqueeze(1) >> torch.arange(0, 8, bits)) & (2 ** bits - 1)
    return torch.where(fields < keep, 2 ** bits / keep, 0.0).to(dtype)


def joint_distribution(block_probs: np.ndarray) -> np.ndarray:
    """Joint distribution over all 2^(u*s) codes from block distributions (u, 2^s): the Kronecker
    product, last block outermost (block j holds bits j*s .. j*s+s-1 of the pattern index)."""
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
