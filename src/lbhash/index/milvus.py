"""`MilvusIndex`: the `CodeIndex` interface over a Milvus collection (pymilvus's `MilvusClient`, imported lazily).

The collection has an INT64 `id`, a BINARY_VECTOR `code` and an ARRAY<INT64> `labels`, and where asked
a BINARY_VECTOR `instance` (the instance codes, lbhash.instance) and a FLOAT16_VECTOR `embedding` (the
float16 unit rows that re-scoring and the blend read): one row holds them all, so one insert writes an
item whole. `code` is indexed BIN_FLAT ("flat") or BIN_IVF_FLAT ("ivf"), `instance` BIN_FLAT (its search
is exact on every kind, as `CodeIndex`'s), metric HAMMING; `embedding` FLAT (Milvus loads a collection
only when each vector field has an index; lbhash never searches it there). Strong consistency. Milvus
orders ties arbitrarily and caps a search at 16,384 results: a top k fetches k + 1 and collects a
boundary tie with range searches paged by distance. Ids are checked before every insert (Milvus does not
enforce unique keys). Several vector fields in one collection need Milvus 2.4 or later. The record of
where the codes came from and the instance transform live in a companion collection (lbhash.index.milvus_record).
"""

from __future__ import annotations

import time

import numpy as np

from lbhash._io import check_name
from lbhash.checks import positive_int
from lbhash.errors import Conflict, InputError, NotFound, one_line, require_extra
from lbhash.index import _checks
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend, InRange, TopK
from lbhash.index.milvus_record import drop_record, read_record, write_record
from lbhash.index.rescore import EMBEDDING_DTYPE, stored_embeddings

MILVUS_CAP = 16384  # Milvus's limit on results per query (topk and range search alike)
MAX_DIM = 32_768    # Milvus's limit on a vector field's dimension
KINDS = {"flat": "BIN_FLAT", "ivf": "BIN_IVF_FLAT"}
FLUSH_AT = 10_000   # adds at least this large are flushed, so that searches need not scan them raw
STEP = 4096         # rows per insert or upsert request
HITS_PER_CALL = 1 << 20  # results one search request may ask for (nq x limit): bounded messages
# the descriptions lbhash gives its optional fields: a field of that name without them is not lbhash's
EMBEDDING_NOTE = "lbhash float16 unit rows"
INSTANCE_NOTE = "lbhash instance codes"


def _pymilvus():
    require_extra("--backend milvus", "milvus", "pymilvus")
    import pymilvus

    return pymilvus


class MilvusIndex(Backend):
    """`lbhash.index.Backend` over a Milvus collection (the module's docstring says how)."""

    def __init__(self, bits: int | None, collection: str = "lbhash", uri: str = "http://127.0.0.1:19530",
                 kind: str = "flat", nlist: int = 1024, nprobe: int = 16, timeout: float = 30.0,
                 embedding_dim: int | None = None, instance_bits: int | None = None):
        """Open `collection` at `uri`, creating it when it does not exist (bits=None: open an
        existing collection only, taking its bits, kind, embedding width and instance bits); a new
        collection keeps embeddings of `embedding_dim` and instance codes of `instance_bits` when given."""
        check_name(collection, "collection", milvus=True)
        pm = _pymilvus()
        if kind not in KINDS:
            raise InputError(f"the milvus backend supports kinds {', '.join(KINDS)}, got {kind!r}")
        self._kind, self.nlist, self.nprobe = kind, positive_int(nlist, "nlist"), positive_int(nprobe, "nprobe")
        self._timeout, self.collection, self.uri = timeout, collection, uri
        # where the codes came from and the instance transform: the companion collection's (milvus_record)
        self.metadata: dict = {}
        self.attachments: dict[str, bytes] = {}
        self._dim = None if embedding_dim is None else positive_int(embedding_dim, "embedding_dim")
        if self._dim is not None and self._dim > MAX_DIM:
            raise InputError(f"embedding_dim {self._dim}: a Milvus vector field holds at most {MAX_DIM} values")
        self._ibits = None if instance_bits is None else _checks.check_bits(instance_bits, "instance_bits")
        try:
            self._client = pm.MilvusClient(uri=uri, timeout=timeout)
            exists = self._client.has_collection(collection, timeout=timeout)
        except Exception as err:  # pymilvus raises several types for an unreachable server
            raise InputError(f"cannot reach Milvus at {uri} ({one_line(err)})") from None
        if exists:
            self._adopt_existing(bits)
        elif bits is None:
            raise InputError(f"no Milvus collection {collection!r} at {uri}")
        else:
            self._bits = _checks.check_bits(bits)
            self._create(pm)
        self._client.load_collection(collection, timeout=timeout)
        if exists:
            self.metadata, self.attachments = read_record(self._client, collection, timeout)

    def save_record(self) -> None:
        """Keep `metadata` and `attachments` on the server, beside the collection (lbhash.index.milvus_record)."""
        write_record(self._client, _pymilvus(), self.collection, self.metadata, self.attachments, self._timeout)

    def _create(self, pm) -> None:
        schema = pm.MilvusClient.create_schema(auto_id=False, description=f"lbhash codes, kind={self._kind}")
        schema.add_field("id", pm.DataType.INT64, is_primary=True)
        schema.add_field("code", pm.DataType.BINARY_VECTOR, dim=self._bits)
        schema.add_field("labels", pm.DataType.ARRAY, element_type=pm.DataType.INT64, max_capacity=4096)
        indexes = self._client.prepare_index_params()
        indexes.add_index("code", index_type=KINDS[self._kind], metric_type="HAMMING",
                          params={"nlist": self.nlist} if self._kind == "ivf" else {})
        if self._ibits is not None:
            schema.add_field("instance", pm.DataType.BINARY_VECTOR, dim=self._ibits, description=INSTANCE_NOTE)
            indexes.add_index("instance", index_type="BIN_FLAT", metric_type="HAMMING")
        if self._dim is not None:
            schema.add_field("embedding", pm.DataType.FLOAT16_VECTOR, dim=self._dim, description=EMBEDDING_NOTE)
            indexes.add_index("embedding", index_type="FLAT", metric_type="IP")
        try:
            self._client.create_collection(self.collection, schema=schema, index_params=indexes,
                                           consistency_level="Strong", timeout=self._timeout)
        except Exception as err:  # a store that lacks an index type or field type (Milvus Lite: no BIN_IVF_FLAT)
            if self._client.has_collection(self.collection, timeout=self._timeout):  # (made before its index failed)
                self._client.drop_collection(self.collection, timeout=self._timeout)
            raise InputError(f"Milvus at {self.uri} cannot make a {self._kind} collection "
                             f"({KINDS[self._kind]}) {self.collection!r}: {one_line(err)}") from None

    def _adopt_existing(self, bits: int | None) -> None:
        fields = {f["name"]: f for f in self._client.describe_collection(self.collection, timeout=self._timeout)["fields"]}
        name = self.collection
        dim = _vector_dim(fields.get("code"), "BINARY_VECTOR")
        if dim is None:
            raise InputError(f"Milvus collection {name!r} has no binary 'code' field")
        if bits is not None and dim != bits:
            raise InputError(f"Milvus collection {name!r} holds {dim}-bit codes, not {bits}")
        self._bits = dim
        kept = fields.get("embedding")
        if kept is not None and _type_name(kept) == "VARCHAR":
            raise InputError(f"Milvus collection {name!r} keeps its embeddings as base64 text (lbhash's layout for "
                             "Milvus 2.3): drop it (pymilvus: MilvusClient(URI).drop_collection(NAME)) and build it again")
        self._dim = self._own_field(kept, "FLOAT16_VECTOR", EMBEDDING_NOTE)
        self._ibits = self._own_field(fields.get("instance"), "BINARY_VECTOR", INSTANCE_NOTE)
        for index in self._client.list_indexes(name, timeout=self._timeout):
            described = self._client.describe_index(name, index, timeout=self._timeout)
            found = {v: k for k, v in KINDS.items()}.get(described.get("index_type"))
            if described.get("field_name") == "code" and found:
                self._kind = found
                params = described.get("params") if isinstance(described.get("params"), dict) else described
                self.nlist = int(params.get("nlist", self.nlist)) if found == "ivf" else self.nlist

    def _own_field(self, field: dict | None, kind: str, note: str) -> int | None:
        """The dimension of an optional field lbhash wrote (None: the collection has none)."""
        if field is None:
            return None
        dim = _vector_dim(field, kind)
        if dim is None or not str(field.get("description", "")).startswith(note):
            raise InputError(f"Milvus collection {self.collection!r} has a {field['name']!r} field lbhash did not write")
        return dim

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
    def instance_bits(self) -> int | None:
        return self._ibits

    @property
    def ntotal(self) -> int:
        res = self._client.query(self.collection, filter="", output_fields=["count(*)"], consistency_level="Strong",
                                 timeout=self._timeout)
        return int(res[0]["count(*)"])

    def add(self, codes, ids=None, labels=None, upsert: bool = False, embeddings=None, instance=None) -> np.ndarray:
        codes = _checks.packed_codes(codes, self._bits)
        if ids is None:
            raise InputError("the milvus backend needs explicit ids (Milvus cannot tell the largest id)")
        ids = _checks.item_ids(ids, len(codes))
        if instance is not None and self._ibits is None:  # (its schema is fixed when the collection is made)
            raise InputError(f"Milvus collection {self.collection!r} keeps no instance codes (made without "
                             "instance_bits): add codes alone, or make a collection with instance codes")
        inst = _checks.instance_codes(instance, len(codes), self._ibits, held=True)
        units = stored_embeddings(embeddings, len(codes), self._dim, held=True)
        rows = None if labels is None else _checks.label_rows(labels, len(codes))
        if not upsert:
            present = set(self._rows(ids, []))
            if present:
                raise Conflict(f"id {min(present)} is already in the index (pass upsert=True to replace it)")
        lists = [[] for _ in ids] if rows is None else rows.to_lists()
        write = self._client.upsert if upsert else self._client.insert
        for start in range(0, len(ids), STEP):
            batch = []
            for r in range(start, min(len(ids), start + STEP)):  # one row: the code and what goes with it land together
                row = {"id": int(ids[r]), "code": codes[r].tobytes(), "labels": [int(c) for c in lists[r]]}
                if inst is not None:
                    row["instance"] = inst[r].tobytes()
                if units is not None:
                    row["embedding"] = units[r]
                batch.append(row)
            write(self.collection, batch, timeout=self._timeout)
        if len(ids) >= FLUSH_AT:
            self._flush()
        return ids

    def _flush(self) -> None:
        """Seal the new segments and wait (within the timeout) until their indexes are built, so that
        searches need not scan them raw; past the timeout searches stay right, only slower."""
        self._client.flush(self.collection, timeout=self._timeout)
        deadline = time.monotonic() + self._timeout
        for index in self._client.list_indexes(self.collection, timeout=self._timeout):
            while time.monotonic() < deadline:
                described = self._client.describe_index(self.collection, index, timeout=self._timeout)
                if not int(described.get("pending_index_rows", 0) or 0):
                    break
                time.sleep(0.5)

    def remove(self, ids) -> int:
        ids = _checks.item_ids(ids)
        missing = sorted(set(ids.tolist()) - set(self._rows(ids, [])))
        if missing:
            raise NotFound(f"id {missing[0]} is not in the index")
        for start in range(0, len(ids), MILVUS_CAP):
            self._client.delete(self.collection, filter=f"id in {ids[start:start + MILVUS_CAP].tolist()}",
                                timeout=self._timeout)
        return len(ids)

    def drop(self) -> None:
        self._client.drop_collection(self.collection, timeout=self._timeout)
        drop_record(self._client, self.collection, self._timeout)

    def stats(self) -> dict:
        return {"backend": "milvus", "collection": self.collection, "bits": self._bits, "kind": self._kind,
                "ntotal": self.ntotal, "params": {"nlist": self.nlist, "nprobe": self.nprobe} if self._kind == "ivf" else {},
                "embedding_dim": self._dim, "instance_bits": self._ibits}

    def close(self) -> None:
        self._client.close()

    def get(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(codes, multi-hot labels (m, one past the largest class id among them))."""
        ids, found = self._fetch(ids, ["code", "labels"])
        lists = [found[i]["labels"] for i in ids]
        width = max((max(row, default=-1) + 1 for row in lists), default=0)
        labels = np.zeros((len(ids), width), bool)
        for r, row in enumerate(lists):
            labels[r, list(row)] = True
        return self._vectors(ids, found, "code", self._bits // 8, np.uint8), labels

    def get_codes(self, ids) -> np.ndarray:
        ids, found = self._fetch(ids, ["code"])
        return self._vectors(ids, found, "code", self._bits // 8, np.uint8)

    def get_instance_codes(self, ids) -> np.ndarray:
        if self._ibits is None:
            raise InputError(f"Milvus collection {self.collection!r} keeps no instance codes")
        ids, found = self._fetch(ids, ["instance"])
        return self._vectors(ids, found, "instance", self._ibits // 8, np.uint8)

    def get_embeddings(self, ids) -> np.ndarray:
        if self._dim is None:
            raise InputError(f"Milvus collection {self.collection!r} keeps no embeddings")
        ids, found = self._fetch(ids, ["embedding"])
        return self._vectors(ids, found, "embedding", self._dim, EMBEDDING_DTYPE)

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

    @staticmethod
    def _vectors(ids: list[int], found: dict, field: str, width: int, dtype) -> np.ndarray:
        """The `field` vectors of `ids` as rows (m, width) of `dtype`, from the bytes Milvus returns."""
        rows = [np.frombuffer(_vector_bytes(found[i][field]), dtype) for i in ids]
        return np.array(rows, dtype).reshape(len(ids), width)

    def check_k(self, k, name: str = "k") -> int:
        """A number of results one Milvus search can return (at most MILVUS_CAP - 1: a top k
        fetches k + 1)."""
        k = _checks.top_k(k)
        if k > MILVUS_CAP - 1:
            raise InputError(f"{name} must be at most {MILVUS_CAP - 1} with the milvus backend (Milvus caps results "
                             f"at {MILVUS_CAP})")
        return k

    def search(self, queries, k: int, labels=None) -> TopK:
        return self._top_k("code", _checks.packed_codes(queries, self._bits, "queries"), self.check_k(k), labels)

    def instance_search(self, queries, k: int, labels=None) -> TopK:
        """Top-k by the Hamming distance of instance codes: exact (BIN_FLAT) on every kind, by (distance, id)."""
        if self._ibits is None:
            raise InputError(f"Milvus collection {self.collection!r} keeps no instance codes")
        queries = _checks.packed_codes(queries, self._ibits, "instance queries")
        return self._top_k("instance", queries, self.check_k(k), labels)

    def _top_k(self, field: str, queries: np.ndarray, k: int, labels) -> TopK:
        exprs = self._filters(labels, len(queries))
        dist = np.full((len(queries), k), PAD_DISTANCE, np.int32)
        ids = np.full((len(queries), k), PAD_ID, np.int64)
        for expr, members in _groups(exprs):
            if expr is False:
                continue
            found = self._search(field, queries[members], k + 1, {}, expr)
            # ties cut at the k-th distance: collect every item at that distance, per distance
            cut = [(row, hits[k - 1][0]) for row, hits in enumerate(found) if len(hits) > k and hits[k][0] == hits[k - 1][0]]
            for value in sorted({v for _, v in cut}):
                rows = [row for row, v in cut if v == value]
                for row, hits in zip(rows, self._range_many(field, queries[members[rows]], value, expr)):
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
                for q, hits in zip(members, self._range_many("code", queries[members], radius, expr)):
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
            for row in self._client.query(self.collection, filter=f"id in {chunk}", output_fields=["id", *fields],
                                          consistency_level="Strong", timeout=self._timeout):
                found[int(row["id"])] = row
        return found

    def _filters(self, labels, nq: int) -> list:
        """A filter expression per query ("" for none, False where nothing can match)."""
        if labels is None:
            return [""] * nq
        rows = _checks.label_rows(labels, nq, "query labels").to_lists()
        return [f"array_contains_any(labels, {row})" if row else False for row in rows]

    def _search(self, field: str, queries, limit: int, extra: dict, expr: str):
        """Per query: a list of (distance, id), by searching `field`."""
        params = {"metric_type": "HAMMING", "params": {"nprobe": self.nprobe, **extra} if field == "code" else extra}
        per_call = max(1, HITS_PER_CALL // limit)
        out = []
        for start in range(0, len(queries), per_call):
            res = self._client.search(self.collection, data=[q.tobytes() for q in queries[start:start + per_call]],
                                      anns_field=field, limit=limit, filter=expr, search_params=params,
                                      output_fields=[], consistency_level="Strong", timeout=self._timeout)
            out.extend([(int(round(h["distance"])), int(h["id"])) for h in hits] for hits in res)
        return out

    def _range_many(self, field: str, queries, radius: int, expr: str):
        """Per query, every item within `radius` (inclusive): Milvus keeps
        range_filter <= d < radius. A query that hits the cap is paged by distance."""
        found = self._search(field, queries, MILVUS_CAP, {"radius": radius + 1, "range_filter": 0}, expr)
        for row, hits in enumerate(found):
            if len(hits) < MILVUS_CAP:
                continue
            found[row] = []
            for d in range(radius + 1):  # one search per distance value
                band = self._search(field, queries[row:row + 1], MILVUS_CAP, {"radius": d + 1, "range_filter": d}, expr)[0]
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


def _type_name(field: dict) -> str:
    """A described field's type as a name ("BINARY_VECTOR"), whatever form pymilvus gives it in."""
    kind = field.get("type")
    return getattr(kind, "name", str(kind)).rsplit(".", 1)[-1]


def _vector_dim(field: dict | None, kind: str) -> int | None:
    """The dimension of a described vector field of type `kind`; None for no field or another type."""
    if field is None or _type_name(field) != kind:
        return None
    dim = field.get("params", {}).get("dim")
    return None if dim is None else int(dim)


def _vector_bytes(value) -> bytes:
    """One vector's bytes: Milvus returns a binary or float16 vector as bytes, or a list holding them."""
    if isinstance(value, list) and value and isinstance(value[0], (bytes, bytearray)):
        return bytes(value[0])
    return bytes(value)
