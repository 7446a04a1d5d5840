"""Search over packed binary codes (docs/search.md): `Backend`, the one interface that `CodeIndex`
(FAISS) and `MilvusIndex` (imported lazily) implement; `blended_search` (the one ranking by stored
embeddings and instance codes, lbhash.index.blend) and `search_hits` (every search of the command
line and the service, lbhash.index.hits). Raw inputs become `Queries` above it (lbhash.serving.searcher).
"""

from lbhash.index._ivf import KINDS
from lbhash.index._engines import search_on_this_thread, threads_for
from lbhash.index._lookup import table_bytes_per_item
from lbhash.index.backend import PAD_DISTANCE, PAD_ID, Backend, InRange, TopK
from lbhash.index.code_index import AddPlan, CodeIndex
from lbhash.index.hits import Hits, SearchOptions, SearchPlan, Spelling, check_classes, plan_search, search_hits
from lbhash.index.rescore import RESCORE_FACTOR
from lbhash.index.blend import LOOKS_LIKE, Blended, Queries, blended_search
from lbhash.index.sparse_labels import SparseLabels


def __getattr__(name):
    if name == "MilvusIndex":  # pymilvus is optional: import it only when asked for
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex
    raise AttributeError(f"module 'lbhash.index' has no attribute {name!r}")


__all__ = ["Backend", "TopK", "InRange", "CodeIndex", "MilvusIndex", "AddPlan", "SparseLabels", "KINDS", "PAD_ID",
           "PAD_DISTANCE", "RESCORE_FACTOR", "LOOKS_LIKE", "Blended", "blended_search", "search_on_this_thread",
           "threads_for", "table_bytes_per_item", "Hits", "Queries", "SearchOptions", "SearchPlan", "Spelling", "check_classes", "plan_search", "search_hits"]
