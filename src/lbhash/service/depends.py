"""What the handlers take as FastAPI dependencies, each set once by `create_app` on `app.state` and
declared by the handlers that use it, e.g. `def get_item(store: StoreDep, ...)`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated

from fastapi import Depends, Request

from lbhash import limits as table
from lbhash.errors import InputError
from lbhash.indexes.duplicates import ServedGroups
from lbhash.serving.searcher import QueryEncoder
from lbhash.service.access import Access
from lbhash.service.batching import SearchBatcher
from lbhash.service.decode import PixelBudget
from lbhash.service.media import ItemMedia
from lbhash.service.offload import Offload
from lbhash.serving.index_store import Store


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


def _from_state(name: str):
    """The dependency that gives `app.state.<name>`: `async`, so FastAPI calls it on the event
    loop, not through its thread pool."""
    async def dependency(request: Request):
        return getattr(request.app.state, name)
    return dependency


store = _from_state("store")
encoder = _from_state("encoder")  # the attached run's `QueryEncoder` (None without one: codes only)
limits = _from_state("limits")
media = _from_state("media")
decoding = _from_state("decoding")  # the service's `PixelBudget` of pixels being decoded at once
batcher = _from_state("batcher")
access = _from_state("access")
offload = _from_state("offload")  # the threads of the blocking work (lbhash.service.offload)
groups = _from_state("groups")  # the served index's groups of copies, kept (lbhash.indexes.duplicates)

StoreDep = Annotated[Store, Depends(store)]
EncoderDep = Annotated[QueryEncoder | None, Depends(encoder)]
LimitsDep = Annotated[Limits, Depends(limits)]
MediaDep = Annotated[ItemMedia, Depends(media)]
AccessDep = Annotated[Access, Depends(access)]
BatcherDep = Annotated[SearchBatcher, Depends(batcher)]
DecodingDep = Annotated[PixelBudget, Depends(decoding)]
OffloadDep = Annotated[Offload, Depends(offload)]
GroupsDep = Annotated[ServedGroups, Depends(groups)]
