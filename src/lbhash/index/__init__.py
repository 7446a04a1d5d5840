"""Search over packed binary codes (docs/search.md): `CodeIndex` (FAISS), `MilvusIndex` (a Milvus
server, imported lazily), and `Searcher`, which encodes raw inputs before searching.
`search(..., rerank=real)` re-ranks the Hamming candidates by the queries' real-valued outputs
(`rerank_search`, lbhash.index.rerank).

See docs/search.md for the kinds, their guarantees, persistence and the service.
"""

from lbhash.index.code_index import KINDS, PAD_DISTANCE, PAD_ID, RERANK_FACTOR, AddPlan, CodeIndex, threads_for
from lbhash.index.rerank import rerank_search
from lbhash.index.searcher import Searcher
from lbhash.index.sparse_labels import SparseLabels


def __getattr__(name):
    if name == "MilvusIndex":  # pymilvus is optional: import it only when asked for
        from lbhash.index.milvus import MilvusIndex

        return MilvusIndex
    raise AttributeError(f"module 'lbhash.index' has no attribute {name!r}")


__all__ = ["CodeIndex", "Searcher", "MilvusIndex", "AddPlan", "SparseLabels", "KINDS", "PAD_ID", "PAD_DISTANCE",
           "RERANK_FACTOR", "rerank_search", "threads_for"]
