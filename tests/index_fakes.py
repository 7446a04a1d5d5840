"""Stand-ins: for the training layer's encoder (a fixed random projection and a sign), and for
a Milvus server (`fake_milvus`: a MilvusIndex over a collection kept in a dict)."""

import json

import numpy as np

from lbhash.data.input_form import InputForm
from lbhash.encoders import Encoder


class FakeEncoder(Encoder):
    """Features (or images' per-channel means and mean squares) through a fixed random projection."""

    def __init__(self, dim=12, bits=32, input_kind="features", seed=0):
        self.bits_, self.input_kind_ = bits, input_kind
        self.dim = 6 if input_kind == "images" else dim
        self.input_form_ = InputForm(input_kind, None, self.dim if input_kind == "features" else None)
        self.projection = np.random.default_rng(seed).standard_normal((self.dim, bits))

    def _forward(self, inputs, embedded, batch_size):
        """(the projections themselves (float64), the features the projection reads)."""
        if self.input_kind_ == "images":
            x = np.asarray(inputs, np.float64) / 255.0  # any image size
            feats = np.concatenate([x.mean(axis=(1, 2)), (x ** 2).mean(axis=(1, 2))], axis=1) - 0.3
        else:
            feats = np.asarray(getattr(inputs, "x", inputs), np.float64)  # a feature data set: its rows
        return feats @ self.projection, (feats if embedded else None)


class FakeClient:
    """The pymilvus `MilvusClient` calls MilvusIndex makes on its collection (query by id or count,
    insert, upsert, delete, search), answered from a dict by brute force, so that MilvusIndex runs
    without a server. Like Milvus, it returns ties in no particular order: here by descending id."""

    def __init__(self):
        self.rows = {}

    def query(self, collection_name, filter, output_fields, consistency_level=None, timeout=None):
        if output_fields == ["count(*)"]:
            return [{"count(*)": len(self.rows)}]
        wanted = json.loads(filter.removeprefix("id in "))
        return [{"id": i, **{f: self.rows[i][f] for f in output_fields if f != "id"}} for i in wanted if i in self.rows]

    def insert(self, collection_name, data, timeout=None):
        for row in data:
            self.rows[row["id"]] = dict(row)

    upsert = insert

    def delete(self, collection_name, filter, timeout=None):
        for i in json.loads(filter.removeprefix("id in ")):
            self.rows.pop(i, None)

    def search(self, collection_name, data, anns_field, limit, filter, search_params, output_fields=None,
               consistency_level=None, timeout=None):
        extra = search_params["params"]
        low, high = extra.get("range_filter", 0), extra.get("radius", float("inf"))  # low <= d < high
        classes = set(json.loads(filter[filter.index("["):-1])) if filter else set()  # array_contains_any(labels, [..])
        results = []
        for query in data:
            hits = [{"distance": float(_hamming(query, row[anns_field])), "id": i} for i, row in self.rows.items()
                    if not classes or classes & set(row["labels"])]
            hits = [h for h in hits if low <= h["distance"] < high]
            results.append(sorted(hits, key=lambda h: (h["distance"], -h["id"]))[:limit])
        return results

    def close(self) -> None:
        pass


def _hamming(a: bytes, b: bytes) -> int:
    return int(np.unpackbits(np.frombuffer(a, np.uint8) ^ np.frombuffer(b, np.uint8)).sum())


def fake_milvus(bits: int, embedding_dim=None, instance_bits=None):
    """A MilvusIndex over a FakeClient (lbhash.index.milvus; no pymilvus, no server)."""
    from lbhash.index.milvus import MilvusIndex

    class FakeMilvusIndex(MilvusIndex):
        def __init__(self):
            self._bits, self._kind, self.nlist, self.nprobe = bits, "flat", 1024, 16
            self._timeout, self.collection, self.uri, self._client = 1.0, "fake", "fake", FakeClient()
            self.metadata, self.attachments, self._dim, self._ibits = {}, {}, embedding_dim, instance_bits

    return FakeMilvusIndex()
