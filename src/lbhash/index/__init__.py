"""Search over packed binary codes (docs/search.md): `Backend`, the one interface of a backend
(lbhash.index.backend: `search` returns `TopK`, `range_search` `InRange`), which `CodeIndex`
(FAISS) and `MilvusIndex` (a Milvus server, imported lazily) implement. Codes and embeddings in,
neighbours out: raw inputs become `Queries` above it (lbhash.runs.searcher).
`rescore_search(index, queries, k, embeddings)` re-scores any backend's Hamming candidates by
cosine similarity to the embeddings it keeps (lbhash.index.rescore), returning `Reranked`. `search_hits`
(lbhash.index.hits) is every search of the command line and the service: one `Hits` per query.

See docs/search.md for the kinds, their guarantees, persistence and the service.
"""

from lbhash.index._kinds import KINDS
from lbhash.index._padding import PAD_DISTANCE, PAD_ID
from lbhash.index._engines import search_on_this_thread, threads_for
from lbhash.index.backend import Backend, InRange, Reranked, TopK
from lbhash.index.code_index import AddPlan, CodeIndex
from lbhash.index.hits import Hits, Queries, SearchPlan, Spelling, check_classes, plan_search, search_hits
from lbhash.index.rescore import RESCORE_FACTOR, rescore_search
from lbhash.index.sparse_labels import SparseLabels


def __getattr__(name):
    if name == "MilvusIndex":  # pymilvus is optional: import it only when asked for
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex
    raise AttributeError(f"module 'lbhash.index' has no attribute {name!r}")


__all__ = ["Backend", "TopK", "InRange", "Reranked", "CodeIndex", "MilvusIndex", "AddPlan", "SparseLabels", "KINDS", "PAD_ID", "PAD_DISTANCE",
           "RESCORE_FACTOR", "rescore_search", "search_on_this_thread", "threads_for", "Hits", "Queries", "SearchPlan", "Spelling", "check_classes",
           "plan_search", "search_hits"]
