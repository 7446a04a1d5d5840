"""The one forward loop (lbhash.train.forward): `encode` gives int8 +/-1 codes, `embed` the float32
real outputs of the same forward loop, and the codes are exactly their signs."""

import numpy as np
import pytest
import torch
from torch import nn

from lbhash.codes import to_signs
from lbhash.data import ArrayDataset
from lbhash.models.hash_model import create_feature_model
from lbhash.train.forward import ForwardPass, embed, embed_sharded, embed_with_features, encode, encode_sharded
from lbhash.train.processes import OneProcess

BITS = 16


@pytest.fixture
def model_and_data():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, BITS))
    model.bits = BITS
    x = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    return model, ArrayDataset(x, np.zeros((50, 0), bool), None, "x")


def test_embed_gives_float32_outputs_and_encode_their_signs(model_and_data):
    model, ds = model_and_data
    u = embed(model, ds, how=ForwardPass(batch_size=7))
    codes = encode(model, ds, how=ForwardPass(batch_size=7))
    assert u.dtype == np.float32 and u.shape == (50, BITS)
    assert codes.dtype == np.int8 and codes.shape == (50, BITS)
    np.testing.assert_array_equal(codes, to_signs(u))
    with torch.no_grad():
        np.testing.assert_allclose(u, model(torch.from_numpy(ds.x)).numpy(), rtol=1e-6, atol=1e-6)
    assert model.training  # both leave the model in the mode they found it in
    idx = np.array([3, 1, 4])
    np.testing.assert_array_equal(encode(model, ds, idx), codes[idx])
    np.testing.assert_allclose(embed(model, ds, idx), u[idx], rtol=1e-6, atol=1e-6)


def test_outputs_of_zero_are_plus_one_bits(model_and_data):
    model, ds = model_and_data
    with torch.no_grad():
        model[2].weight.zero_()
        model[2].bias.copy_(torch.tensor([0.0, -0.0, -1.0, 2.0] * 4))
    u = embed(model, ds, [0, 1])
    assert (u[:, [0, 1]] == 0).all()
    np.testing.assert_array_equal(encode(model, ds, [0, 1])[:, :4], [[1, 1, -1, 1]] * 2)


def test_no_items_give_an_empty_array_of_each_type(model_and_data):
    model, ds = model_and_data
    none = np.array([], np.int64)
    codes, u = encode(model, ds, none), embed(model, ds, none)
    assert codes.dtype == np.int8 and codes.shape == (0, BITS)
    assert u.dtype == np.float32 and u.shape == (0, BITS)


def test_one_process_shards_give_what_the_encoder_gives(model_and_data):
    model, ds = model_and_data
    fabric = OneProcess(torch.device("cpu"))
    np.testing.assert_array_equal(encode_sharded(fabric, model, ds), encode(model, ds))
    hash_model = create_feature_model(8, BITS, hidden=[32])  # a model that gives its embeddings too
    real, emb = embed_sharded(fabric, hash_model, ds)
    want_real, want_emb = embed_with_features(hash_model, ds)
    np.testing.assert_array_equal(real, want_real)
    np.testing.assert_array_equal(emb, want_emb)
    np.testing.assert_array_equal(emb, ds.x)  # a feature model's embedding is its input row
