"""`MilvusIndex`: the `CodeIndex` interface over a Milvus collection (pymilvus, imported lazily).

The collection has an INT64 `id`, a BINARY_VECTOR `code` and an ARRAY<INT64> `labels`; BIN_FLAT
("flat") or BIN_IVF_FLAT ("ivf"), metric HAMMING, Strong consistency. Milvus orders ties arbitrarily
and caps a search at 16,384 results: top-k fetches k + 1 and collects a boundary tie with range
searches paged by distance. Ids are checked before every insert (Milvus does not enforce unique
keys). With `embedding_dim` each item's float16 unit embedding is kept in base64 in a VARCHAR.
"""

from __future__ import annotations

import base64
import uuid

import numpy as np

from lbhash._io import check_name
from lbhash.checks import positive_int
from lbhash.errors import Conflict, InputError, NotFound, one_line, require_extra
from lbhash.index import _checks
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend, InRange, TopK
from lbhash.index.rescore import EMBEDDING_DTYPE, stored_embeddings

MILVUS_CAP = 16384  # Milvus's limit on results per query (topk and range search alike)
KINDS = {"flat": "BIN_FLAT", "ivf": "BIN_IVF_FLAT"}
FLUSH_AT = 10_000  # adds at least this large are flushed, so that searches need not scan them raw


def _pymilvus():
    require_extra("--backend milvus", "milvus", "pymilvus")
    import pymilvus

    return pymilvus


class MilvusIndex(Backend):
    """`lbhash.index.Backend` over a Milvus collection (the module's docstring says how)."""

    def __init__(self, bits: int | None, collection: str = "lbhash", uri: str = "http://127.0.0.1:19530",
                 kind: str = "flat", nlist: int = 1024, nprobe: int = 16, timeout: float = 30.0,
                 embedding_dim: int | None = None):
        """Open `collection` at `uri`, creating it when it does not exist (bits=None: open an
        existing collection only, taking its bits, kind and embedding width); a new collection
        keeps embeddings of `embedding_dim` when given."""
        check_name(collection, "collection", milvus=True)
        pm = _pymilvus()
        if kind not in KINDS:
            raise InputError(f"the milvus backend supports kinds {', '.join(KINDS)}, got {kind!r}")
        self._kind, self.nlist, self.nprobe = kind, positive_int(nlist, "nlist"), positive_int(nprobe, "nprobe")
        self._timeout, self._alias, self.collection = timeout, f"lbhash-{uuid.uuid4().hex[:8]}", collection
        self.metadata: dict = {}  # (a collection keeps no record of its codes' model or data)
        self._dim = None if embedding_dim is None else positive_int(embedding_dim, "embedding_dim")
        if self._dim is not None and _b64_length(self._dim) > MAX_VARCHAR:
            raise InputError(f"embedding_dim {self._dim}: a Milvus collection keeps embeddings of at most "
                             f"{3 * (MAX_VARCHAR // 4) // 2} values (their base64 in a VARCHAR of {MAX_VARCHAR})")
        try:
            pm.connections.connect(alias=self._alias, uri=uri, timeout=timeout)
        except Exception as err:  # pymilvus raises several types for an unreachable server
            raise InputError(f"cannot reach Milvus at {uri} ({one_line(err)})") from None
        if pm.utility.has_collection(collection, using=self._alias):
            self._col = pm.Collection(collection, using=self._alias)
            self._adopt_existing(bits)
        elif bits is None:
            raise InputError(f"no Milvus collection {collection!r} at {uri}")
        else:
            self._bits = _checks.check_bits(bits)
            self._col = self._create(pm, collection)
        self._col.load(timeout=timeout)

    def _create(self, pm, name: str):
        fields = [
            pm.FieldSchema("id", pm.DataType.INT64, is_primary=True, auto_id=False),
            pm.FieldSchema("code", pm.DataType.BINARY_VECTOR, dim=self._bits),
            pm.FieldSchema("labels", pm.DataType.ARRAY, element_type=pm.DataType.INT64, max_capacity=4096),
        ]
        if self._dim is not None:
            fields.append(pm.FieldSchema("embedding", pm.DataType.VARCHAR, max_length=_b64_length(self._dim),
                                         description=f"{EMBEDDING_FIELD}{self._dim}"))
        schema = pm.CollectionSchema(fields, description=f"lbhash codes, kind={self._kind}")
        col = pm.Collection(name, schema, using=self._alias, consistency_level="Strong")
        params = {"nlist": self.nlist} if self._kind == "ivf" else {}
        col.create_index("code", {"index_type": KINDS[self._kind], "metric_type": "HAMMING", "params": params},
                         timeout=self._timeout)
        return col

    def _adopt_existing(self, bits: int | None) -> None:
        field = next((f for f in self._col.schema.fields if f.name == "code"), None)
        dim = None if field is None else field.params.get("dim")
        if dim is None:
            raise InputError(f"Milvus collection {self.collection!r} has no binary 'code' field")
        if bits is not None and int(dim) != bits:
            raise InputError(f"Milvus collection {self.collection!r} holds {dim}-bit codes, not {bits}")
        self._bits = int(dim)
        kept = next((f for f in self._col.schema.fields if f.name == "embedding"), None)
        if kept is not None and not str(kept.description).startswith(EMBEDDING_FIELD):
            raise InputError(f"Milvus collection {self.collection!r} has an 'embedding' field lbhash did not write")
        self._dim = None if kept is None else int(str(kept.description).removeprefix(EMBEDDING_FIELD))
        for index in self._col.indexes:
            found = {v: k for k, v in KINDS.items()}.get(index.params.get("index_type"))
            self._kind = found or self._kind
            if found == "ivf":
                self.nlist = int(index.params.get("params", {}).get("nlist", self.nlist))

    @property
    def bits(self) -> int:
        return self._bits

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def exact(self) -> bool:
        return self._kind == "flat"

    @property
    def embedding_dim(self) -> int | None:
        return self._dim

    @property
    def ntotal(self) -> int:
        res = self._col.query(expr="", output_fields=["count(*)"], consistency_level="Strong", timeout=self._timeout)
        return int(res[0]["count(*)"])

    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None, instance=None) -> np.ndarray:
        if instance is not None:  # (docs/search.md, "Instance codes": not on Milvus yet)
            raise InputError("the milvus backend keeps no instance codes yet: build the index without them "
                             "(--instance-bits 0), or use the faiss backend")
        codes = _checks.packed_codes(codes, self._bits)
        if ids is None:
            raise InputError("the milvus backend needs explicit ids (Milvus cannot tell the largest id)")
        ids = _checks.item_ids(ids, len(codes))
        units = stored_embeddings(embeddings, len(codes), self._dim, held=True)  # (its schema is fixed)
        rows = None if labels is None else _checks.label_rows(labels, len(codes))
        if not upsert:
            present = set(self._rows(ids, []))
            if present:
                raise Conflict(f"id {min(present)} is already in the index (pass upsert=True to replace it)")
        lists = [[] for _ in ids] if rows is None else rows.to_lists()
        step = 4096
        for start in range(0, len(ids), step):
            part = slice(start, start + step)
            data = [ids[part].tolist(), [c.tobytes() for c in codes[part]], lists[part]]
            if units is not None:  # one write: the code and its embedding land together
                data.append([base64.b64encode(row.tobytes()).decode("ascii") for row in units[part]])
            (self._col.upsert if upsert else self._col.insert)(data, timeout=self._timeout)
        if len(ids) >= FLUSH_AT:  # seal the new segments and wait for their index
            self._col.flush(timeout=self._timeout)
            _pymilvus().utility.wait_for_index_building_complete(self.collection, using=self._alias,
                                                                 timeout=self._timeout)
        return ids

    def remove(self, ids) -> int:
        ids = _checks.item_ids(ids)
        missing = sorted(set(ids.tolist()) - set(self._rows(ids, [])))
        if missing:
            raise NotFound(f"id {missing[0]} is not in the index")
        if len(ids):
            self._col.delete(f"id in {ids.tolist()}", timeout=self._timeout)
        return len(ids)

    def drop(self) -> None:
        self._col.drop(timeout=self._timeout)

    def stats(self) -> dict:
        return {"backend": "milvus", "collection": self.collection, "bits": self._bits, "kind": self._kind,
                "ntotal": self.ntotal, "params": {"nlist": self.nlist, "nprobe": self.nprobe} if self._kind == "ivf" else {}}

    def close(self) -> None:
        _pymilvus().connections.disconnect(self._alias)

    def get(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(codes, multi-hot labels (m, one past the largest class id among them))."""
        ids, found = self._fetch(ids, ["code", "labels"])
        lists = [found[i]["labels"] for i in ids]
        width = max((max(row, default=-1) + 1 for row in lists), default=0)
        labels = np.zeros((len(ids), width), bool)
        for r, row in enumerate(lists):
            labels[r, list(row)] = True
        return self._codes(ids, found), labels

    def get_codes(self, ids) -> np.ndarray:
        ids, found = self._fetch(ids, ["code"])
        return self._codes(ids, found)

    def get_embeddings(self, ids) -> np.ndarray:
        if self._dim is None:
            raise InputError(f"Milvus collection {self.collection!r} keeps no embeddings")
        ids, found = self._fetch(ids, ["embedding"])
        rows = [np.frombuffer(base64.b64decode(found[i]["embedding"]), EMBEDDING_DTYPE) for i in ids]
        return np.array(rows, EMBEDDING_DTYPE).reshape(len(ids), self._dim)

    def labels_of(self, ids) -> list[list[int]]:
        """The class ids of each given item (ascending, without repeats), in the order of `ids`."""
        ids, found = self._fetch(ids, ["labels"])
        return [sorted({int(c) for c in found[i]["labels"]}) for i in ids]

    def _fetch(self, ids, fields: list[str]) -> tuple[list[int], dict]:
        """(ids as Python ints, {id: row with `fields`}); an id not in the collection is an error."""
        ids = _checks.item_ids(ids)
        found = self._rows(ids, fields)
        ids = ids.tolist()
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFound(f"id {missing[0]} is not in the index")
        return ids, found

    def _codes(self, ids: list[int], found: dict) -> np.ndarray:
        codes = np.array([np.frombuffer(_code_bytes(found[i]["code"]), np.uint8) for i in ids], np.uint8)
        return codes.reshape(len(ids), self._bits // 8)

    def check_k(self, k, name: str = "k") -> int:
        """A number of results one Milvus search can return (at most MILVUS_CAP - 1: a top k
        fetches k + 1)."""
        k = _checks.top_k(k)
        if k > MILVUS_CAP - 1:
            raise InputError(f"{name} must be at most {MILVUS_CAP - 1} with the milvus backend (Milvus caps results "
                             f"at {MILVUS_CAP})")
        return k

    def search(self, queries, k: int, labels=None) -> TopK:
        k = self.check_k(k)
        queries = _checks.packed_codes(queries, self._bits, "queries")
        exprs = self._filters(labels, len(queries))
        dist = np.full((len(queries), k), PAD_DISTANCE, np.int32)
        ids = np.full((len(queries), k), PAD_ID, np.int64)
        for expr, members in _groups(exprs):
            if expr is False:
                continue
            found = self._search(queries[members], k + 1, {}, expr)
            # ties cut at the k-th distance: collect every item at that distance, per distance
            cut = [(row, hits[k - 1][0]) for row, hits in enumerate(found) if len(hits) > k and hits[k][0] == hits[k - 1][0]]
            for value in sorted({v for _, v in cut}):
                rows = [row for row, v in cut if v == value]
                for row, hits in zip(rows, self._range_many(queries[members[rows]], value, expr)):
                    found[row] = hits
            for q, hits in zip(members, found):
                hits = sorted(hits)[:k]
                dist[q, :len(hits)] = [h[0] for h in hits]
                ids[q, :len(hits)] = [h[1] for h in hits]
        return TopK(dist, ids)

    def range_search(self, queries, radius: int, labels=None) -> InRange:
        radius = min(_checks.radius_value(radius), self._bits)
        queries = _checks.packed_codes(queries, self._bits, "queries")
        exprs = self._filters(labels, len(queries))
        per_query = [[] for _ in range(len(queries))]
        for expr, members in _groups(exprs):
            if expr is not False:
                for q, hits in zip(members, self._range_many(queries[members], radius, expr)):
                    per_query[q] = sorted(hits)
        lims = np.concatenate([[0], np.cumsum([len(h) for h in per_query])]).astype(np.int64)
        dist = np.array([h[0] for hits in per_query for h in hits], np.int32)
        ids = np.array([h[1] for hits in per_query for h in hits], np.int64)
        return InRange(lims, dist, ids)

    def _rows(self, ids: np.ndarray, fields: list[str]) -> dict[int, dict]:
        """{id: row with `fields`} of the given ids that the collection holds."""
        found = {}
        for start in range(0, len(ids), MILVUS_CAP):
            chunk = ids[start:start + MILVUS_CAP].tolist()
            for row in self._col.query(f"id in {chunk}", output_fields=["id", *fields],
                                       consistency_level="Strong", timeout=self._timeout):
                found[int(row["id"])] = row
        return found

    def _filters(self, labels, nq: int) -> list:
        """A filter expression per query ("" for none, False where nothing can match)."""
        if labels is None:
            return [""] * nq
        rows = _checks.label_rows(labels, nq, "query labels").to_lists()
        return [f"array_contains_any(labels, {row})" if row else False for row in rows]

    def _search(self, queries, limit: int, extra: dict, expr: str):
        """Per query: a list of (distance, id)."""
        params = {"metric_type": "HAMMING", "params": {"nprobe": self.nprobe, **extra}}
        res = self._col.search([q.tobytes() for q in queries], "code", params, limit=limit, expr=expr or None,
                               consistency_level="Strong", timeout=self._timeout)
        return [[(int(round(h.distance)), int(h.id)) for h in hits] for hits in res]

    def _range_many(self, queries, radius: int, expr: str):
        """Per query, every item within `radius` (inclusive): Milvus keeps
        range_filter <= d < radius. A query that hits the cap is paged by distance."""
        found = self._search(queries, MILVUS_CAP, {"radius": radius + 1, "range_filter": 0}, expr)
        for row, hits in enumerate(found):
            if len(hits) < MILVUS_CAP:
                continue
            found[row] = []
            for d in range(radius + 1):  # one search per distance value
                band = self._search(queries[row:row + 1], MILVUS_CAP, {"radius": d + 1, "range_filter": d}, expr)[0]
                if len(band) >= MILVUS_CAP:
                    raise InputError(f"more than {MILVUS_CAP} items lie at distance {d} from a query; Milvus "
                                     "cannot return them all (use a smaller radius or the faiss backend)")
                found[row].extend(band)
        return found


def _groups(exprs: list):
    """(expression, query numbers) for each distinct filter expression."""
    seen: dict = {}
    for q, expr in enumerate(exprs):
        seen.setdefault(expr, []).append(q)
    return [(expr, np.array(members)) for expr, members in seen.items()]


EMBEDDING_FIELD = "lbhash float16 unit rows, base64, dim="
MAX_VARCHAR = 65_535  # Milvus's longest VARCHAR


def _b64_length(dim: int) -> int:
    """Characters of the base64 of one float16 row of `dim` values (Milvus's VARCHAR holds 65,535)."""
    return 4 * -(-2 * dim // 3)


def _code_bytes(value) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, list) and value and isinstance(value[0], (bytes, bytearray)):
        return bytes(value[0])
    return bytes(value)
