"""`lbhash serve`: the HTTP search service over an index (docs/search.md)."""

from __future__ import annotations

from pathlib import Path

import click

from lbhash.cli.index import backend_options
from lbhash.limits import MAX_BATCH, MAX_BODY_BYTES, MAX_K


@click.command()
@click.argument("index_dir")
@click.option("--run", "run_dir", type=click.Path(path_type=Path),
              help="Trained run whose model encodes feature or image queries.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--compact-every", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Fold the write-ahead log into the saved index after this many changes.")
@click.option("--max-batch", type=click.IntRange(1, MAX_BATCH), default=MAX_BATCH, show_default=True,
              help="Most queries or items in one request (lbhash.limits: may only be lowered).")
@click.option("--max-k", type=click.IntRange(1, MAX_K), default=MAX_K, show_default=True,
              help="Most results per query (lbhash.limits: may only be lowered).")
@click.option("--max-body-mb", type=click.IntRange(1, MAX_BODY_BYTES >> 20), default=MAX_BODY_BYTES >> 20,
              show_default=True, help="Largest request body in MiB (lbhash.limits: may only be lowered).")
@backend_options
def serve(index_dir: str, run_dir, host: str, port: int, compact_every: int, max_batch: int, max_k: int,
          max_body_mb: int, backend: str, uri: str) -> None:
    """Serve INDEX_DIR over HTTP (OpenAPI docs at /docs).

    Every acknowledged change is in a write-ahead log (INDEX_DIR.wal beside the directory)
    before the answer, and is folded into the saved index periodically and on shutdown.
    """
    import uvicorn

    from lbhash.cli.index import open_index
    from lbhash.service import IndexStore, Limits, MilvusStore, create_app

    encoder = None
    if run_dir is not None:
        from lbhash.index.sources import load_encoder

        encoder = load_encoder(run_dir)
    store = (MilvusStore(open_index(index_dir, backend, uri)) if backend == "milvus"
             else IndexStore(index_dir, compact_every=compact_every))
    limits = Limits(max_body_bytes=max_body_mb << 20, max_batch=max_batch, max_k=max_k)
    app = create_app(store, encoder, limits=limits)
    click.echo(f"serving {store.ntotal} {store.bits}-bit codes on http://{host}:{port} (docs at /docs)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
