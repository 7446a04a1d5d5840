"""A stand-in for the training layer's encoder: a fixed random projection and a sign."""

import numpy as np

from lbhash.codes import pack


class FakeEncoder:
    def __init__(self, dim=12, bits=32, input_kind="features", seed=0):
        self.bits_, self.input_kind_ = bits, input_kind
        self.dim = 6 if input_kind == "images" else dim
        self.projection = np.random.default_rng(seed).standard_normal((self.dim, bits))

    def features_of(self, images):
        """Images -> per-channel means and mean squares (any image size)."""
        x = np.asarray(images, np.float64) / 255.0
        return np.concatenate([x.mean(axis=(1, 2)), (x ** 2).mean(axis=(1, 2))], axis=1) - 0.3

    def encode(self, x, real=False):
        """Packed codes; real=True: the projections themselves (float64), whose signs they are."""
        if self.input_kind_ == "images":
            x = self.features_of(x)
        x = np.asarray(x, np.float64)
        if x.shape[1] != self.dim:
            raise ValueError(f"features have {x.shape[1]} columns, the encoder takes {self.dim}")
        u = x @ self.projection
        return u if real else pack(np.where(u >= 0, 1, -1))
