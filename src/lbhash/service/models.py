"""Request and response bodies of the HTTP service (they make its OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated

from fastapi import UploadFile
from pydantic import BaseModel, ConfigDict, Field, Strict

from lbhash.indexes.instance_codes import (LOOKS_LIKE, LOOKS_LIKE_APART, LOOKS_LIKE_CODES, LOOKS_LIKE_CODES_LEARNED,
                                           LOOKS_LIKE_LEARNED)

# Numbers in a request are JSON numbers: `true` is not class 1, "3" and 3.0 are not id 3
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]  # an integer is a number too
Number = Int | Float  # a feature value: integers are stored values of quantised features


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Strict):
    """Queries as packed codes in hex (byte 0 first, FAISS bit layout) or as feature vectors
    (needs a run attached to the service); top-`k`, or every item within `radius`. The ranking
    (top-k only; on by default where the index keeps embeddings or instance codes and the queries
    have embeddings: `features` through the attached run, or `embeddings` beside `codes`): the top
    k * rescore_factor candidates of each code ranked by one score (`looks_like`; docs/search.md,
    "Ranking"); `rescore: false` keeps the Hamming order."""

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
    embeddings: list[list[Float]] | None = Field(
        None, description="Per query (with 'codes'): its embedding, as wide as the index's (GET /stats: "
                          "embedding_dim); the hits are ranked with the cosine similarity to the items' embeddings.")
    rescore: Annotated[bool, Strict()] | None = Field(
        None, description="Rank the candidates by the embeddings and instance codes (default: true where the index "
                          "keeps either and the queries have embeddings); false: Hamming order only.")
    rescore_factor: Int | None = Field(
        None, ge=1, description="Candidates per result from each code that a ranked search scores (default 4).")
    looks_like: Float | None = Field(
        None, ge=0, le=1, description="The ranking from 0 (same class first) to 1 (looks like first) (default "
                                      f"{LOOKS_LIKE_LEARNED} where the index keeps a learned instance code and its "
                                      f"float rows, {LOOKS_LIKE} where it keeps other instance codes and float rows, "
                                      f"{LOOKS_LIKE_CODES_LEARNED} with a learned instance code alone, "
                                      f"{LOOKS_LIKE_CODES} with other instance codes alone, raised query by query up to "
                                      f"{LOOKS_LIKE_APART} where a query's look-alikes do not share its class "
                                      "code, else 1; docs/search.md, "
                                      "\"Ranking\").")



class ImageSearchForm(BaseModel):
    """The form of an image search (`POST /search/image`): the image `files`, and as SearchRequest's
    fields, `labels` comma-separated class ids for every query."""

    files: list[UploadFile]
    k: int | None = Field(None, ge=1)
    radius: int | None = Field(None, ge=0)
    labels: str | None = None
    rescore: bool | None = None
    rescore_factor: int | None = Field(None, ge=1)
    looks_like: float | None = Field(None, ge=0, le=1)


class ImageItemsForm(BaseModel):
    """The form of `POST /items/image`: the image `files`; `ids` comma-separated; `labels` per image,
    separated by ';' (e.g. "1,2;0")."""

    files: list[UploadFile]
    ids: str | None = None
    labels: str | None = None
    upsert: bool = False

class Hit(BaseModel):
    id: int
    distance: int = Field(description="Hamming distance to the query's code.")
    labels: list[int]
    score: float | None = Field(None, description="Ranked searches: (1 - looks_like) x (1 - 2 distance / bits) + "
                                                  "looks_like x similarity^3 (hits by descending score, ties by "
                                                  "distance, instance distance, then id); otherwise absent.")
    instance_distance: int | None = Field(None, description="Where the index keeps instance codes: the Hamming distance "
                                                         "of the query's and the item's instance codes.")
    same: bool | None = Field(None, description="Ranked searches: the item is the same picture as the query (an "
                                                "edited copy or a duplicate; never marked where the index keeps "
                                                "no instance codes).")
    source: str | None = Field(None, description="Where the item came from, as /sources says (null: not recorded).")
    image: bool | None = Field(None, description="Whether GET /items/{id}/image has a thumbnail.")
    code: str | None = Field(None, description="The item's code (hex); null for an item deleted since the search.")


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
    embeddings: list[list[Float]] | None = Field(
        None, description="Per item (with 'codes'), where the index keeps embeddings: its embedding; with "
                          "'features', the attached run gives them.")
    upsert: Annotated[bool, Strict()] = Field(False, description="Replace items whose id is already present.")


class ItemsResponse(BaseModel):
    ids: list[int]
    seq: int | None = Field(None, description="Write-ahead log sequence number of the change.")
    ntotal: int


class Item(BaseModel):
    id: int
    code: str
    labels: list[int]
    embedding: list[float] | None = Field(None, description="Where the index keeps embeddings: the item's, as "
                                                            "stored (unit length); /search takes it as is.")


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
