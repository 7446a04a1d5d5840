"""The HTTP search service (FastAPI): `create_app` over the stores of the application layer
(`lbhash.serving.index_store`: `Store`, the one interface of `IndexStore` and `MilvusStore`). Sits above
`lbhash.serving` and below `lbhash.cli`; see docs/service.md."""

from lbhash.service.app import create_app
from lbhash.service.depends import Limits

__all__ = ["create_app", "Limits"]
