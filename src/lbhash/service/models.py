"""Request and response bodies of the HTTP service (they make its OpenAPI schema)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """Queries as packed codes in hex (byte 0 first, FAISS bit layout) or as feature vectors
    (needs a run attached to the service); top-`k`, or every item within `radius`."""

    codes: list[str] | None = Field(None, description="One hex string per query, 2 digits per byte.")
    features: list[list[float]] | None = Field(None, description="One feature vector per query.")
    k: int | None = Field(None, ge=1, description="Results per query (default 10).")
    radius: int | None = Field(None, ge=0, description="Every item within this Hamming distance, inclusive.")
    labels: list[list[int]] | None = Field(
        None, description="Per query: class ids; only items with at least one of them are returned.")


class Hit(BaseModel):
    id: int
    distance: int
    labels: list[int]


class QueryResult(BaseModel):
    hits: list[Hit]


class SearchResponse(BaseModel):
    results: list[QueryResult]


class ItemsRequest(_Strict):
    """Items as hex codes or feature vectors; ids default to numbers after the largest so far."""

    codes: list[str] | None = None
    features: list[list[float]] | None = None
    ids: list[int] | None = None
    labels: list[list[int]] | None = Field(None, description="Per item: its class ids.")
    upsert: bool = Field(False, description="Replace items whose id is already present.")


class ItemsResponse(BaseModel):
    ids: list[int]
    seq: int | None = Field(None, description="Write-ahead log sequence number of the change.")
    ntotal: int


class Item(BaseModel):
    id: int
    code: str
    labels: list[int]


class DeleteResponse(BaseModel):
    id: int
    seq: int | None
    ntotal: int


class Health(BaseModel):
    status: str
    ntotal: int


class Stats(BaseModel):
    model_config = ConfigDict(extra="allow")

    backend: str
    bits: int
    kind: str
    ntotal: int
    input_kind: str | None
    limits: dict[str, int]


class ErrorBody(BaseModel):
    detail: str
