"""What a Milvus collection cannot hold itself: the record of where its codes came from (`metadata`) and
the files that go with them (`attachments`: the instance transform that encodes the queries), kept
in a companion collection `<collection>__lbhash` on the same server (docs/scale.md, "Milvus").

The record is one JSON document, base64 text cut into VARCHAR rows of `CHUNK` characters (Milvus's
VARCHAR holds 65,535 bytes) with their order as ids; a FLOAT_VECTOR of two zeros per row is there
only because Milvus loads no collection without a vector field. It is replaced whole: the old
companion is dropped, then the new one written. What reads it back checks what it can: the JSON
whole, each attachment's SHA-256 against the record (`read_record`); the instance transform's own
identity is checked by `lbhash.indexes.instance_codes.index_transform`.
"""

from __future__ import annotations

import base64
import hashlib
import json

from lbhash.errors import InputError, one_line

SUFFIX = "__lbhash"
CHUNK = 60_000  # base64 characters per row
MAX_NAME = 255  # Milvus's limit on a collection name


def record_name(collection: str) -> str:
    name = collection + SUFFIX
    if len(name) > MAX_NAME:
        raise InputError(f"Milvus collection name {collection!r} leaves no room for its companion {SUFFIX!r} "
                         f"(at most {MAX_NAME - len(SUFFIX)} characters)")
    return name


def write_record(client, pm, collection: str, metadata: dict, attachments: dict[str, bytes], timeout: float) -> None:
    """Replace the companion of `collection` with `metadata` and `attachments` (none of either: no companion)."""
    name = record_name(collection)
    if client.has_collection(name, timeout=timeout):
        client.drop_collection(name, timeout=timeout)
    if not metadata and not attachments:
        return
    document = {"metadata": metadata,
                "attachments": {k: {"sha256": hashlib.sha256(v).hexdigest(), "base64": base64.b64encode(v).decode()}
                                for k, v in attachments.items()}}
    text = base64.b64encode(json.dumps(document).encode()).decode()
    schema = pm.MilvusClient.create_schema(auto_id=False, description=f"lbhash record of {collection}")
    schema.add_field("id", pm.DataType.INT64, is_primary=True)
    schema.add_field("part", pm.DataType.VARCHAR, max_length=CHUNK)
    schema.add_field("pad", pm.DataType.FLOAT_VECTOR, dim=2)
    indexes = client.prepare_index_params()
    indexes.add_index("pad", index_type="FLAT", metric_type="L2")
    client.create_collection(name, schema=schema, index_params=indexes, consistency_level="Strong", timeout=timeout)
    rows = [{"id": i, "part": text[start:start + CHUNK], "pad": [0.0, 0.0]}
            for i, start in enumerate(range(0, len(text), CHUNK))]
    client.insert(name, rows, timeout=timeout)
    client.flush(name, timeout=timeout)


def read_record(client, collection: str, timeout: float) -> tuple[dict, dict[str, bytes]]:
    """(metadata, attachments) of `collection`'s companion; ({}, {}) when it has none; one line when it is damaged."""
    name = record_name(collection)
    if not client.has_collection(name, timeout=timeout):
        return {}, {}
    client.load_collection(name, timeout=timeout)
    rows = client.query(name, filter="id >= 0", output_fields=["part"], consistency_level="Strong", timeout=timeout)
    parts = sorted((int(r["id"]), r["part"]) for r in rows)
    try:
        if [i for i, _ in parts] != list(range(len(parts))):
            raise ValueError("its rows are not numbered 0 to n - 1")
        document = json.loads(base64.b64decode("".join(p for _, p in parts)))
        metadata, files = document["metadata"], document["attachments"]
        attachments = {k: base64.b64decode(v["base64"]) for k, v in files.items()}
        bad = [k for k, v in attachments.items() if hashlib.sha256(v).hexdigest() != files[k]["sha256"]]
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(f"Milvus collection {name!r}, the record of {collection!r}, is damaged ({one_line(err)}): "
                         "build the collection again") from None
    if bad:
        raise InputError(f"Milvus collection {name!r}: {bad[0]} does not match its SHA-256 (checksum): "
                         "build the collection again")
    return metadata, attachments


def drop_record(client, collection: str, timeout: float) -> None:
    name = record_name(collection)
    if client.has_collection(name, timeout=timeout):
        client.drop_collection(name, timeout=timeout)
