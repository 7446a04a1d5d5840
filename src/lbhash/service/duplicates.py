"""`GET /duplicates`: the groups of copies inside the served index, a page at a time (docs/service.md,
"Duplicates"; the page's "Duplicates" view shows them).

The groups are `lbhash duplicates INDEX`'s (lbhash.indexes.duplicates), largest first: found once per state
of the index and threshold by the application layer's `ServedGroups` (the index held still meanwhile,
off the event loop on the service's `Offload` threads) and kept until the index changes. Each group's
items (its first GROUP_ITEMS: a photo a million times is one group) come with their sources and thumbnail
URLs, as the page shows them.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from lbhash.indexes.duplicates import GROUP_PAIRS
from lbhash.service.access import reads_data
from lbhash.service.depends import GroupsDep, MediaDep, OffloadDep
from lbhash.service.media import ItemMedia

MAX_PAGE = 100  # groups in one answer
GROUP_ITEMS = 100  # items of a group in an answer (its smallest ids); `size` says how many it has
router = APIRouter()
ERRORS = {code: {"description": "one line: {\"detail\": \"...\"}"} for code in (400, 422)}


class Group(BaseModel):
    size: int = Field(description="The group's number of items.")
    items: list[int] = Field(description=f"The group's item ids, ascending (its first {GROUP_ITEMS}).")
    sources: list[str | None] = Field(description="Each item's source, as /sources gives it (null: none recorded).")
    images: list[str | None] = Field(description="Each item's thumbnail URL (GET /items/{id}/image); null: none.")
    pairs: list[tuple[int, int, float]] = Field(description=f"[id, id, similarity] of the pairs that joined the group, the "
                                                 f"strongest first (at most {GROUP_PAIRS}).")
    pair_count: int = Field(description="How many pairs joined it.")


class DuplicatesPage(BaseModel):
    groups: list[Group] = Field(description="The groups from `offset`, at most `limit`, largest first.")
    total: int = Field(description="The number of groups of at least min_group items.")
    offset: int
    limit: int
    measure: str = Field(description="\"cosine\" (the float rows' centred cosine), \"instance\" (the share of "
                                     "instance bits two items agree on), \"margin\" (the cosine less the two items' "
                                     "neighbours'), or \"margin_or_instance\" (either).")
    threshold: float = Field(description="The similarity a pair reached: the index's same-picture mark, or the "
                                         "threshold given (for \"instance\": the share of bits that may differ; "
                                         "for \"margin_or_instance\": the margin's).")
    instance_threshold: float | None = Field(None, description="\"margin_or_instance\": the share of instance bits "
                                                               "that may differ for a pair to pass by them.")
    perceptual_threshold: float | None = Field(None, description="Where the index's instance code ends in perceptual "
                                                                 "hashes: a pair whose hashes differ in at most this "
                                                                 "share of their 64 bits passes too.")
    items: int = Field(description="The items of the index.")
    pairs: int = Field(description="The pairs found, in all groups.")


@router.get("/duplicates", response_model=DuplicatesPage, responses=ERRORS, dependencies=[Depends(reads_data)])
async def duplicates(groups: GroupsDep, media: MediaDep, offload: OffloadDep,
                     offset: int = Query(0, ge=0, description="The first group to give (0: the largest)."),
                     limit: int = Query(20, ge=1, le=MAX_PAGE, description="Groups to give at most."),
                     threshold: float | None = Query(None, gt=0, le=1, description=(
                         "The similarity a pair must reach (default: the index's calibrated same-picture mark), "
                         "in the measure of its mark: a centred cosine, a margin, or where the index keeps no float "
                         "rows the share of instance bits that may differ.")),
                     min_group: int = Query(2, ge=2, description="The fewest items a group may have.")):
    """The groups of copies inside the served index (as `lbhash duplicates INDEX --json`), largest first,
    `limit` of them from `offset`; an index without instance codes, or without a calibrated mark and no
    `threshold`, is a 400 saying so. Found once per state of the index and threshold, then kept."""
    return await offload.run(_page, groups, media, threshold, min_group, offset, limit)


def _page(groups, media: ItemMedia, threshold, min_group: int, offset: int, limit: int) -> DuplicatesPage:
    found = groups.groups(threshold, min_group)
    shown = []
    for group in found.groups[offset:offset + limit]:
        items = group["items"][:GROUP_ITEMS]
        origins = [media.origin(i) for i in items]  # (source, how its image is read)
        shown.append(Group(size=len(group["items"]), items=items, sources=[source for source, _ in origins],
                           images=[None if how is None else f"/items/{i}/image" for i, (_, how) in zip(items, origins)],
                           pairs=group["pairs"], pair_count=group["pair_count"]))
    return DuplicatesPage(groups=shown, total=len(found.groups), offset=offset, limit=limit, measure=found.measure,
                          threshold=found.threshold, items=found.items, pairs=found.pairs,
                          instance_threshold=found.instance_threshold, perceptual_threshold=found.perceptual_threshold)
