"""The memory-bank pairwise likelihood of DSDH and DBDH, and its gradient, in one blockwise pass.

    L = mean_ij softplus(theta_ij) - s_ij theta_ij,  theta = 0.5 u U^T,  s_ij = [labels_i . Y_j > 0]
    dL/du = 0.5 (sigmoid(theta) - s) U / (batch n)

Each block of bank rows forms its tile of theta, the loss and its share of dL/du while the tile
is in cache, instead of autograd's batch x n temporaries (docs/results/training.md, "Cost
of the memory-bank methods").
"""

from __future__ import annotations

import torch

from lbhash.errors import InputError

# Elements of one batch x block tile: 2**19 float32 = 2 MiB (8,192 bank rows at batch 64), which
# with its mask and q stays in a 32 MiB L3 (the measured sweep: docs/results/training.md, "Cost of
# the memory-bank methods"); on a GPU the budget only bounds the tile.
CPU_TILE_ELEMENTS = 1 << 19
GPU_TILE_ELEMENTS = 1 << 24
# sum(log q) is taken as log(prod q) over groups of this many q in [0.5, 1]: one log per group
# instead of one per element, and a product >= 2**-64 never underflows (float32's limit is 2**-126)
GROUP = 64


def block_rows(batch: int, device: torch.device) -> int:
    """Bank rows per block: the device's tile budget over the batch, at least GROUP."""
    budget = CPU_TILE_ELEMENTS if device.type == "cpu" else GPU_TILE_ELEMENTS
    return max(GROUP, budget // max(batch, 1))


class BankLikelihood(torch.autograd.Function):
    """The likelihood in forward, with dL/du computed on the way; backward only scales it."""

    @staticmethod
    def forward(ctx, u, labels, bank_u, bank_y, block):
        if any(ctx.needs_input_grad[1:4]):
            raise InputError("bank likelihood: only u takes a gradient (labels and the bank are data)")
        loss, grad = likelihood_and_gradient(u, labels, bank_u, bank_y, block, ctx.needs_input_grad[0])
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        # grad mode is on in backward only under create_graph: a second derivative would be a
        # silent zero (the saved gradient is a constant), so it is refused
        if torch.is_grad_enabled():
            raise RuntimeError("bank likelihood: no second derivative (backward with create_graph=True); "
                               "use the plain formula for double backward")
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None, None, None, None


def bank_likelihood(u: torch.Tensor, labels: torch.Tensor, bank_u: torch.Tensor, bank_y: torch.Tensor,
                    block: int | None = None) -> torch.Tensor:
    """mean over (batch x bank) of softplus(theta) - s * theta, theta = 0.5 u U^T; a 0-d tensor
    of u's dtype whose gradient flows to u only. `block`: bank rows per tile (default: block_rows)."""
    return BankLikelihood.apply(u, labels, bank_u, bank_y, block)


@torch.no_grad()
def likelihood_and_gradient(u: torch.Tensor, labels: torch.Tensor, bank_u: torch.Tensor, bank_y: torch.Tensor,
                            block: int | None = None, need_grad: bool = True
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The loss (u's dtype) and dL/du (None unless need_grad), one pass over the bank's blocks; bf16 and
    float16 in float32 (a 64-factor product in bf16 would lose the loss), float32 and float64 as they are."""
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise InputError(f"bank likelihood: block must be a positive number of rows, got {block!r}")
    dtype = torch.promote_types(u.dtype, torch.float32)
    batch, n = u.shape[0], bank_u.shape[0]
    rows = min(block or block_rows(batch, u.device), max(n, 1))
    half_u = 0.5 * u.to(dtype)  # 0.5 folded into u: an exact scaling, theta = half_u U^T
    labels = labels.to(dtype)
    padded = -(-batch * rows // GROUP) * GROUP
    theta_buf, s_buf = (torch.empty(batch * rows, dtype=dtype, device=u.device) for _ in range(2))
    q_buf = torch.empty(padded, dtype=dtype, device=u.device)
    total = torch.zeros((), dtype=dtype, device=u.device)
    grad = torch.zeros(u.shape, dtype=dtype, device=u.device) if need_grad else None
    for start in range(0, n, rows):
        bank_block = bank_u[start:start + rows].to(dtype)
        shape = (batch, len(bank_block))
        size = batch * len(bank_block)
        theta = torch.mm(half_u, bank_block.T, out=theta_buf[:size].view(shape))
        s = torch.mm(labels, bank_y[start:start + rows].to(dtype).T, out=s_buf[:size].view(shape)).gt_(0)
        total += _block_loss(theta, s, q_buf, size)
        if grad is not None:
            grad.addmm_(theta.sub_(s), bank_block)  # theta holds sigmoid(theta) by now
    scale = batch * n
    loss = (total / scale).to(u.dtype)
    return loss, None if grad is None else (grad / (2 * scale)).to(u.dtype)  # an empty batch: nan, as mean()


def _block_loss(theta: torch.Tensor, s: torch.Tensor, q_buf: torch.Tensor, size: int) -> torch.Tensor:
    """sum of softplus(theta) - s * theta over one tile; leaves sigmoid(theta) in theta.

    softplus(t) = max(t, 0) - log(q), q = sigmoid(|t|) = max(p, 1 - p) with p = sigmoid(t): q lies
    in [0.5, 1], so neither the log nor the grouped product overflows or underflows.
    """
    q = q_buf[:size].view_as(theta)
    part = torch.clamp(theta, min=0, out=q).sum() - torch.dot(s.view(-1), theta.view(-1))
    p = theta.sigmoid_()
    torch.sub(p, 0.5, out=q).abs_().add_(0.5)
    q_buf[size:].fill_(1.0)  # the last group's padding: factors of one
    groups = q_buf[:-(-size // GROUP) * GROUP].view(-1, GROUP)
    return part - groups.prod(dim=1).log_().sum()
