import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lbhash.surrogate import BlockSurrogate, joint_distribution, marginal_product, pattern_indices


def per_block_modules(s: BlockSurrogate) -> list[nn.Sequential]:
    """Plain nn.Sequential blocks holding the same weights as the batched surrogate."""
    blocks = []
    for j in range(s.blocks):
        seq = nn.Sequential(nn.Linear(s.block_size, s.hidden), nn.SiLU(), nn.Dropout(s.dropout),
                            nn.Linear(s.hidden, s.patterns))
        with torch.no_grad():
            seq[0].weight.copy_(s.w1[j].T)
            seq[0].bias.copy_(s.b1[j, 0])
            seq[3].weight.copy_(s.w2[j].T)
            seq[3].bias.copy_(s.b2[j, 0])
        blocks.append(seq.eval())
    return blocks


@pytest.mark.parametrize("bits, block", [(8, 8), (32, 8), (12, 4)])
def test_batched_surrogate_equals_per_block_loop(bits, block):
    torch.manual_seed(0)
    s = BlockSurrogate(bits, block_size=block).eval()
    l = torch.randn(7, bits)
    expected = torch.stack([m(chunk) for m, chunk in zip(per_block_modules(s), l.split(block, dim=1))], 1)
    torch.testing.assert_close(s.logits(l), expected, rtol=1e-5, atol=1e-5)


def test_pattern_index_bit_order():
    s = BlockSurrogate(16, block_size=8)
    x = -torch.ones(3, 16)
    x[0, 0] = 1                  # bit 0 of block 0 -> 1
    x[1, 7] = 1                  # bit 7 of block 0 -> 128
    x[1, 8] = x[1, 10] = 1       # bits 0 and 2 of block 1 -> 5
    x[2] = 1                     # all ones -> 255 in both blocks
    assert s.pattern_index(x).tolist() == [[1, 0], [128, 5], [255, 255]]


def test_loss_pi_matches_per_block_cross_entropy():
    torch.manual_seed(1)
    s = BlockSurrogate(16).eval()
    l = torch.randn(5, 16)
    l[0, 3] = 0.0  # bin(0) = +1
    loss, acc = s.loss_pi(l)
    expected = 0.0
    for j, m in enumerate(per_block_modules(s)):
        chunk = l[:, 8 * j:8 * j + 8]
        target = ((chunk >= 0).long() * (2 ** torch.arange(8))).sum(1)
        expected += F.cross_entropy(m(chunk), target, reduction="mean")
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    target = torch.stack([((l[:, 8 * j:8 * j + 8] >= 0).long() * (2 ** torch.arange(8))).sum(1)
                          for j in range(2)], 1)
    assert float(acc) == pytest.approx(float((s.logits(l).argmax(-1) == target).float().mean()))


def test_pattern_accuracy_of_a_trained_surrogate_is_high():
    torch.manual_seed(6)
    s = BlockSurrogate(8, dropout=0.0)
    l = torch.randn(256, 8)
    opt = torch.optim.Adam(s.parameters(), lr=1e-2)
    for _ in range(300):
        opt.zero_grad()
        s.loss_pi(l)[0].backward()
        opt.step()
    assert float(s.loss_pi(l)[1]) > 0.95


def _center_loss_by_hand(probs, center):
    """-log P(center) from block probabilities (u, 256): each block's pattern from its 8 bits."""
    total = 0.0
    for j in range(probs.shape[0]):
        pattern = sum(2 ** k for k in range(8) if center[8 * j + k] > 0)
        total -= math.log(float(probs[j, pattern]))
    return total


@pytest.mark.parametrize("count", [1, 2, 3])
def test_multilabel_loss_theta_is_the_papers_sum_or_the_named_mean(count):
    """Paper: "for multi-label datasets ... the sum of multiple losses". Per-center losses are
    computed here from the surrogate's block probabilities; `sum` must equal their sum and
    `mean` their mean, for samples with 1, 2 and 3 positive labels."""
    torch.manual_seed(10 + count)
    s = BlockSurrogate(16).eval()
    l = torch.randn(2, 16)
    centers = torch.where(torch.randn(5, 16) >= 0, 1.0, -1.0)
    labels = torch.zeros(2, 5)
    labels[0, :count] = 1
    labels[1, 5 - count:] = 1
    probs = s.block_probs(l)
    per_sample = [[_center_loss_by_hand(probs[b], centers[c]) for c in torch.nonzero(labels[b]).flatten()]
                  for b in range(2)]
    assert all(len(losses) == count for losses in per_sample)
    pats = s.pattern_index(centers)
    summed = float(s.loss_theta(l, pats, labels, multilabel="sum"))
    mean = float(s.loss_theta(l, pats, labels, multilabel="mean"))
    assert summed == pytest.approx(sum(sum(x) for x in per_sample) / 2, rel=1e-5)
    assert mean == pytest.approx(sum(sum(x) / count for x in per_sample) / 2, rel=1e-5)
    assert summed == pytest.approx(mean * count, rel=1e-5)
    assert float(s.loss_theta(l, pats, labels)) == pytest.approx(summed, rel=1e-6)  # the default
    s.train()  # the fused pass (one dropout mask; p = 0 here) gives the same values
    s.dropout = 0.0
    for rule, want in (("sum", summed), ("mean", mean)):
        assert float(s.fused_losses(l, pats, labels, multilabel=rule)[1].detach()) == pytest.approx(want, rel=1e-5)


def test_multilabel_theta_rejects_other_rules():
    s = BlockSurrogate(8)
    with pytest.raises(ValueError, match="multilabel_theta must be one of sum, mean, got 'max'"):
        s.loss_theta(torch.randn(1, 8), torch.zeros(1, 1, dtype=torch.long), torch.ones(1, 1), multilabel="max")


def test_loss_theta_rejects_unlabelled_rows():
    s = BlockSurrogate(8)
    with pytest.raises(ValueError, match="batch row 1 has none"):
        s.loss_theta(torch.randn(2, 8), torch.zeros(2, 1, dtype=torch.long), torch.tensor([[1, 0], [0, 0]]))


def test_loss_theta_gradient_reaches_outputs_not_pi():
    torch.manual_seed(3)
    head = nn.Linear(5, 16)
    s = BlockSurrogate(16)
    l = head(torch.randn(4, 5))
    pats = s.pattern_index(torch.ones(2, 16))
    s.loss_theta(l, pats, torch.tensor([[1, 0], [0, 1], [1, 0], [1, 1]])).backward()
    assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in s.parameters())


def test_loss_pi_gradient_reaches_pi_not_outputs():
    head = nn.Linear(5, 16)
    s = BlockSurrogate(16)
    s.loss_pi(head(torch.randn(4, 5)))[0].backward()
    assert head.weight.grad is None
    assert all(p.grad is not None for p in s.parameters())


def test_one_step_decreases_loss_on_fixed_batch():
    torch.manual_seed(4)
    s = BlockSurrogate(16, dropout=0.0)
    l = torch.randn(64, 16)
    opt = torch.optim.Adam(s.parameters(), lr=1e-3)
    before = s.loss_pi(l)[0].item()
    opt.zero_grad()
    s.loss_pi(l)[0].backward()
    opt.step()
    assert s.loss_pi(l)[0].item() < before


def test_joint_distribution_is_block_product_in_pattern_order():
    rng = np.random.default_rng(0)
    blocks = rng.dirichlet(np.ones(16), size=2)  # two 4-bit blocks
    joint = joint_distribution(blocks)
    assert joint.shape == (256,) and joint.sum() == pytest.approx(1.0)
    for _ in range(20):
        code = rng.choice([-1, 1], size=(1, 8))
        idx = pattern_indices(code)[0]
        lo = pattern_indices(code[:, :4])[0]
        hi = pattern_indices(code[:, 4:])[0]
        assert joint[idx] == pytest.approx(blocks[0][lo] * blocks[1][hi])


def test_marginal_product_hand_case():
    signs = np.array([[1, 1], [1, -1], [-1, -1], [1, -1]])
    # p(bit0 = +1) = 3/4, p(bit1 = +1) = 1/4; index = bit0 + 2 * bit1
    expected = [1 / 4 * 3 / 4, 3 / 4 * 3 / 4, 1 / 4 * 1 / 4, 3 / 4 * 1 / 4]
    np.testing.assert_allclose(marginal_product(signs), expected)


def test_block_size_must_divide_bits():
    with pytest.raises(ValueError, match="bits=12 is not divisible by the block size 8"):
        BlockSurrogate(12)


def test_default_initialisation_matches_linear_bounds():
    s = BlockSurrogate(8)
    assert s.w1.abs().max().item() <= 1 / math.sqrt(8)
    assert s.w2.abs().max().item() <= 1 / math.sqrt(256)


@pytest.mark.parametrize("p, bits", [(0.5, 1), (0.25, 2), (0.0625, 4), (0.3, 16), (0.9, 16)])
def test_dropout_mask_keeps_each_element_with_probability_one_minus_p(p, bits):
    """The CPU mask draws 1, 2, 4 or 16 random bits per element; whatever it draws, each element is
    kept with probability 1 - p (exactly, or to 1/65536 on the 16-bit path), independently of its
    neighbours, and a kept element is scaled by 1 / its keep probability."""
    from lbhash.surrogate import _dropout_mask

    torch.manual_seed(0)
    n_masks, shape = 40, (3, 50, 70)  # 10,500 elements: not a multiple of 8 or 64
    masks = torch.stack([_dropout_mask(shape, p, torch.device("cpu")) for _ in range(n_masks)]).flatten(1)
    keep = round(2 ** bits * (1 - p)) / 2 ** bits
    assert torch.unique(masks).tolist() == [0.0, pytest.approx(1 / keep, rel=1e-6)]
    kept = masks > 0
    sigma = (keep * (1 - keep) / kept.numel()) ** 0.5
    assert abs(kept.float().mean().item() - keep) < 5 * sigma
    # neighbours (the same random byte at 1-4 bits) are independent: P(both kept) = keep^2
    both = (kept[:, 1:] & kept[:, :-1]).float().mean().item()
    assert abs(both - keep ** 2) < 5 * (keep ** 2 * (1 - keep ** 2) / kept[:, 1:].numel()) ** 0.5
    # and each position has its own draws: none is kept or dropped in every mask
    share = kept.float().mean(0)
    assert share.min() > 0 or keep < 0.2
    assert share.max() < 1 or keep > 0.8
