"""The HTTP search service (FastAPI): `create_app` and the stores it serves (`Store`, the one
interface of `IndexStore` and `MilvusStore`). Sits above `lbhash.index` and below `lbhash.cli`;
see docs/search.md."""

from lbhash.service.app import create_app
from lbhash.service.depends import Limits
from lbhash.service.store import IndexStore, MilvusStore, Store, wal_path_for

__all__ = ["create_app", "Limits", "Store", "IndexStore", "MilvusStore", "wal_path_for"]
