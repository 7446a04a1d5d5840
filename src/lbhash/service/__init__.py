"""The HTTP search service (FastAPI): `create_app` and the stores it serves. Sits above
`lbhash.index` and below `lbhash.cli`; see docs/search.md."""

from lbhash.service.app import Limits, create_app
from lbhash.service.store import IndexStore, MilvusStore, wal_path_for

__all__ = ["create_app", "Limits", "IndexStore", "MilvusStore", "wal_path_for"]
