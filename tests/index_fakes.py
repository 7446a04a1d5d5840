"""Stand-ins: for the training layer's encoder (a fixed random projection and a sign), and for
a Milvus server (`fake_milvus`: a MilvusIndex over a collection kept in a dict)."""

import json
from types import SimpleNamespace

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

    def encode(self, x, *, json_numbers=False):
        """Packed codes: the signs of `embed`."""
        return pack(np.where(self.embed(x) >= 0, 1, -1))

    def embed(self, x, *, json_numbers=False):
        """The projections themselves (float64)."""
        if self.input_kind_ == "images":
            x = self.features_of(x)
        x = np.asarray(getattr(x, "x", x), np.float64)  # a feature data set: its rows
        if x.shape[1] != self.dim:
            raise ValueError(f"features have {x.shape[1]} columns, the encoder takes {self.dim}")
        return x @ self.projection

    def outputs(self, x, *, json_numbers=False):
        """(real outputs, embeddings): the embeddings are the features the projection reads."""
        feats = self.features_of(x) if self.input_kind_ == "images" else np.asarray(getattr(x, "x", x), np.float64)
        return self.embed(x), feats

    def identity(self):
        return None

    def run_info(self):
        return None


class FakeCollection:
    """The pymilvus Collection calls MilvusIndex makes (query by id or count, insert, upsert,
    delete, search), answered from a dict by brute force, so that MilvusIndex runs without a
    server. Like Milvus, it returns ties in no particular order: here by descending id."""

    def __init__(self):
        self.rows = {}

    def query(self, expr, output_fields, consistency_level=None, timeout=None):
        if output_fields == ["count(*)"]:
            return [{"count(*)": len(self.rows)}]
        wanted = json.loads(expr.removeprefix("id in "))
        return [{"id": i, **{f: self.rows[i][f] for f in output_fields if f != "id"}} for i in wanted if i in self.rows]

    def insert(self, data, timeout=None):
        for i, code, labels, *emb in zip(*data):
            self.rows[i] = {"code": code, "labels": labels, **({"embedding": emb[0]} if emb else {})}

    upsert = insert

    def delete(self, expr, timeout=None):
        for i in json.loads(expr.removeprefix("id in ")):
            self.rows.pop(i, None)

    def search(self, data, anns_field, param, limit, expr=None, consistency_level=None, timeout=None):
        extra = param["params"]
        low, high = extra.get("range_filter", 0), extra.get("radius", float("inf"))  # low <= d < high
        classes = set(json.loads(expr[expr.index("["):-1])) if expr else set()  # array_contains_any(labels, [..])
        results = []
        for query in data:
            hits = [SimpleNamespace(distance=float(_hamming(query, row["code"])), id=i) for i, row in self.rows.items()
                    if not classes or classes & set(row["labels"])]
            hits = [h for h in hits if low <= h.distance < high]
            results.append(sorted(hits, key=lambda h: (h.distance, -h.id))[:limit])
        return results


def _hamming(a: bytes, b: bytes) -> int:
    return int(np.unpackbits(np.frombuffer(a, np.uint8) ^ np.frombuffer(b, np.uint8)).sum())


def fake_milvus(bits: int, embedding_dim=None):
    """A MilvusIndex over a FakeCollection (lbhash.index.milvus; no pymilvus, no server)."""
    from lbhash.index.milvus import MilvusIndex

    class FakeMilvusIndex(MilvusIndex):
        def __init__(self):
            self._bits, self._kind, self.nlist, self.nprobe = bits, "flat", 1024, 16
            self._timeout, self.collection, self._col = 1.0, "fake", FakeCollection()
            self.metadata, self._dim = {}, embedding_dim

        def close(self) -> None:
            pass

    return FakeMilvusIndex()
