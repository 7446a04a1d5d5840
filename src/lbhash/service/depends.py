"""What the handlers take as FastAPI dependencies, each set once by `create_app` on `app.state`
and declared by the handlers that use it, e.g. `def get_item(store: StoreDep, ...)`. The
functions are `async`, so FastAPI calls them on the event loop, not through its thread pool.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated

from fastapi import Depends, Request

from lbhash import limits as table
from lbhash.errors import InputError
from lbhash.runs.searcher import QueryEncoder
from lbhash.service.access import Access
from lbhash.service.batching import SearchBatcher
from lbhash.service.decode import PixelBudget
from lbhash.service.media import ItemMedia
from lbhash.service.store import Store



@dataclass(frozen=True)
class Limits:
    """The service's limits: the table of lbhash.limits, which a server may only lower."""

    max_body_bytes: int = table.MAX_BODY_BYTES
    max_batch: int = table.MAX_BATCH
    max_k: int = table.MAX_K
    max_class_id: int = table.MAX_CLASS_ID
    max_rescore_candidates: int = table.MAX_RESCORE_CANDIDATES
    max_decoding_pixels: int = table.MAX_DECODING_PIXELS

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            ceiling = table.TABLE[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
                raise InputError(f"{name} must be an integer from 1 to {ceiling} (lbhash.limits), got {value!r}")


async def store(request: Request) -> Store:
    return request.app.state.store


async def encoder(request: Request) -> QueryEncoder | None:
    """The attached run's encoder (None without one: codes only)."""
    return request.app.state.encoder


async def limits(request: Request) -> Limits:
    return request.app.state.limits


async def media(request: Request) -> ItemMedia:
    return request.app.state.media


async def decoding(request: Request) -> PixelBudget:
    """The service's budget of pixels being decoded at once (lbhash.service.decode)."""
    return request.app.state.decoding


async def batcher(request: Request) -> SearchBatcher:
    return request.app.state.batcher


async def access(request: Request) -> Access:
    return request.app.state.access


StoreDep = Annotated[Store, Depends(store)]
EncoderDep = Annotated[QueryEncoder | None, Depends(encoder)]
LimitsDep = Annotated[Limits, Depends(limits)]
MediaDep = Annotated[ItemMedia, Depends(media)]
AccessDep = Annotated[Access, Depends(access)]
BatcherDep = Annotated[SearchBatcher, Depends(batcher)]
DecodingDep = Annotated[PixelBudget, Depends(decoding)]
