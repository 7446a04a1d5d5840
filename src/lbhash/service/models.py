"""Request and response bodies of the HTTP service (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

# Numbers in a request are JSON numbers: `true` is not class 1, "3" and 3.0 are not id 3
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]  # an integer is a number too
Number = Int | Float  # a feature value: integers are stored values of quantised features


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """Queries as packed codes in hex (byte 0 first, FAISS bit layout) or as feature vectors
    (needs a run attached to the service); top-`k`, or every item within `radius`. Re-ranking
    (top-k only): `real` beside `codes`, or `rerank_factor` with `features` (the attached run
    computes the real outputs); the Hamming top k * rerank_factor are re-ranked by the
    asymmetric score (docs/search.md, "Re-ranking")."""

    codes: list[str] | None = Field(None, description="One hex string per query, 2 digits per byte.")
    features: list[list[Number]] | None = Field(
        None, description="One feature vector per query, through the run's input contract: for a run trained on "
                          "quantised features, rows of integers are stored values and rows with decimals are "
                          "feature values (docs/data.md#the-input-contract).")
    k: Int | None = Field(None, ge=1, description="Results per query (default 10).")
    radius: Int | None = Field(None, ge=0, description="Every item within this Hamming distance, inclusive; at most "
                                "the service's max_k per query, else 400.")
    labels: list[list[Int]] | None = Field(
        None, description="Per query: class ids; only items with at least one of them are returned.")
    real: list[list[Float]] | None = Field(
        None, description="Per query (with 'codes'): its real-valued outputs, one number per bit (raw u, or "
                          "tanh(u)); the hits are re-ranked by sum_j real_j * b_j (b the item's +/-1 code).")
    rerank_factor: Int | None = Field(
        None, ge=1, description="Hamming candidates per result that are re-ranked (default 4); with "
                                "'features', asks for re-ranking.")


class Hit(BaseModel):
    id: int
    distance: int = Field(description="Hamming distance to the query's code.")
    labels: list[int]
    score: float | None = Field(None, description="Re-ranked searches: the asymmetric score (hits by descending "
                                                  "score, ties by id); otherwise absent.")
    source: str | None = Field(None, description="/search/image: where the item came from, as /sources says; "
                                                 "absent from /search.")
    image: bool | None = Field(None, description="/search/image: whether GET /items/{id}/image has a thumbnail.")
    code: str | None = Field(None, description="/search/image: the item's code (hex).")


class QueryResult(BaseModel):
    code: str = Field(description="The query's code (hex): as given, or the attached run's encoding of its "
                                  "features or image.")
    hits: list[Hit]


class SearchResponse(BaseModel):
    results: list[QueryResult]


class ItemsRequest(_Strict):
    """Items as hex codes or feature vectors; ids default to numbers after the largest so far."""

    codes: list[str] | None = None
    features: list[list[Number]] | None = None
    ids: list[Int] | None = None
    labels: list[list[Int]] | None = Field(None, description="Per item: its class ids.")
    upsert: Annotated[bool, Strict()] = Field(False, description="Replace items whose id is already present.")


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
    media: dict | None = None  # bytes of the images kept from uploads and their budget


class ErrorBody(BaseModel):
    detail: str
