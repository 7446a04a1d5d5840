"""`lbhash serve`: the HTTP search service over an index (docs/service.md); `lbhash export`: a run's model
as ONNX, for serving without torch (docs/export.md)."""

from __future__ import annotations

import signal
import socket
from dataclasses import replace
from pathlib import Path

import click

from lbhash.cli.index import backend_options
from lbhash.cli.search import encoder_options, model_source
from lbhash.errors import InputError, require_extra
from lbhash.limits import (BATCH_ROWS, HEADER_TIMEOUT_S, MAX_BATCH, MAX_BODY_BYTES, MAX_CONNECTIONS, MAX_DECODING_PIXELS,
                           MAX_K, MAX_RESCORE_CANDIDATES, MEDIA_BUDGET_BYTES)


@click.command()
@click.argument("index_dir")
@encoder_options
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--compact-every", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Fold the write-ahead log into the saved index after this many changes.")
@click.option("--max-batch", type=click.IntRange(1, MAX_BATCH), default=MAX_BATCH, show_default=True,
              help="Most queries or items in one request (lbhash.limits: may only be lowered).")
@click.option("--max-k", type=click.IntRange(1, MAX_K), default=MAX_K, show_default=True,
              help="Most results per query (lbhash.limits: may only be lowered).")
@click.option("--max-body-mb", type=click.IntRange(1, MAX_BODY_BYTES >> 20), default=MAX_BODY_BYTES >> 20,
              show_default=True, help="Largest request body in MiB (lbhash.limits: may only be lowered).")
@click.option("--max-rescore-candidates", type=click.IntRange(1, MAX_RESCORE_CANDIDATES), default=MAX_RESCORE_CANDIDATES,
              show_default=True, help="Most Hamming candidates (k * rescore_factor) a re-ranked search re-scores per "
                                      "query (lbhash.limits: may only be lowered).")
@click.option("--max-connections", type=click.IntRange(1, MAX_CONNECTIONS), default=MAX_CONNECTIONS,
              show_default=True, help="Most open connections and requests in progress; beyond them the "
                                      "service answers 503 (lbhash.limits: may only be lowered).")
@click.option("--header-timeout", type=click.FloatRange(0.1, HEADER_TIMEOUT_S), default=HEADER_TIMEOUT_S,
              show_default=True, help="Seconds a connection may take to send a request's headers before it is "
                                      "closed (lbhash.limits: may only be lowered).")
@click.option("--batch-window-ms", type=click.FloatRange(0, 100), default=0.0, show_default=True,
              help="Milliseconds a shared scan waits for more /search requests after its first; 0: it takes only "
                   "those that queued while the previous one ran (no wait when idle).")
@click.option("--batch-rows", type=click.IntRange(1, MAX_BATCH), default=BATCH_ROWS, show_default=True,
              help="Most query rows of concurrent /search requests searched in one scan.")
@click.option("--media-budget-mb", type=click.IntRange(min=1), default=MEDIA_BUDGET_BYTES >> 20, show_default=True,
              help="Most MiB of uploaded images the index keeps (NAME.media/); beyond it an upload gets 507.")
@click.option("--max-decoding-mpixels", type=click.IntRange(1, MAX_DECODING_PIXELS // 10**6),
              default=MAX_DECODING_PIXELS // 10**6, show_default=True,
              help="Most million pixels of images decoded at once, over every request (uploads and thumbnails); "
                   "beyond them a decode waits up to 5 s, then 503 (lbhash.limits: may only be lowered).")
@click.option("--force", is_flag=True, help="Serve --run (or --encoder) even when its model did not make the "
                                           "index's codes.")
@click.option("--read-only", is_flag=True, help="Serve searches, items, thumbnails and the page; refuse every "
                                                 "change (403).")
@click.option("--write-key-file", type=click.Path(path_type=Path), help="File whose first line is the write key "
              "[default: $LBHASH_WRITE_KEY]; every change must send it in the X-Lbhash-Key header.")
@click.option("--allowed-hosts", multiple=True, metavar="NAMES",
              help="Host names (comma-separated, repeatable; .example.com: that domain and the names under it) "
                   "that requests may give in their Host header besides localhost, IP addresses and --host "
                   "[default: $LBHASH_ALLOWED_HOSTS]; any other gets 403 (against DNS rebinding).")
@click.option("--read-key-file", type=click.Path(path_type=Path), help="File whose first line is the read key "
              "[default: $LBHASH_READ_KEY]; searches and reads must send it (or the write key).")
@backend_options
def serve(index_dir: str, run_dir, export_path, host: str, port: int, compact_every: int, max_batch: int, max_k: int,
          max_body_mb: int, max_rescore_candidates: int, max_connections: int, header_timeout: float,
          batch_window_ms: float, batch_rows: int, media_budget_mb: int, max_decoding_mpixels: int, force: bool,
          read_only: bool, write_key_file, allowed_hosts: tuple[str, ...], read_key_file, backend: str, uri: str) -> None:
    """Serve INDEX_DIR over HTTP: a search page at /, API docs at /docs.

    Every acknowledged change is in a write-ahead log (INDEX_DIR.wal beside the directory)
    before the answer, and is folded into the saved index periodically and on shutdown.
    On a loopback address anyone on this machine may change the index unless a key is set
    (a read key alone guards changes too); on any other address the service needs a key or
    --read-only. Keys come from
    files or the environment, never from the command line (docs/service.md, "Exposing the
    service"). Needs the 'serve' extra (pip install 'lbhash[serve]'); --backend milvus also
    the 'milvus' one.
    """
    require_extra("lbhash serve", "serve", "fastapi", "uvicorn", ("python_multipart", "multipart"), "fastapi_offline")
    if backend == "milvus":
        require_extra("--backend milvus", "milvus", "pymilvus")
    import uvicorn

    from lbhash.indexes.index_dir import open_index, saved_metadata
    from lbhash.indexes.index_inputs import check_index_model, query_encoder
    from lbhash.serving.index_store import IndexStore, MilvusStore
    from lbhash.service import Limits, create_app
    from lbhash.service.access import HostNames, access_from_environment
    from lbhash.service.batching import Batching
    from lbhash.service.http import server_config, serving_interpreter

    access = access_from_environment(read_only, write_key_file, read_key_file)
    if access.open_for_writes and not _loopback(host):
        raise InputError(f"--host {host}: anyone who reaches it could change the index; set a write or read key "
                         "(LBHASH_WRITE_KEY or --write-key-file) or serve --read-only")
    access = replace(access, allowed_hosts=HostNames.for_server(host, allowed_hosts))
    # read-only: a missing or broken index is named before the port is taken
    metadata = saved_metadata(index_dir) if backend != "milvus" else None
    model_source(run_dir, export_path)
    check_index_model(metadata, index_dir, run_dir, export_path, force)
    sock = _listen(host, port)  # before opening: a busy port must leave the index and its log untouched
    try:
        encoder = query_encoder(run_dir, export_path)
        store = (MilvusStore(open_index(index_dir, backend, uri)) if backend == "milvus"
                 else IndexStore(index_dir, compact_every=compact_every))
        limits = Limits(max_body_bytes=max_body_mb << 20, max_batch=max_batch, max_k=max_k,
                        max_rescore_candidates=max_rescore_candidates,
                        max_decoding_pixels=max_decoding_mpixels * 10**6)
        app = create_app(store, encoder, limits=limits, access=access, media_budget=media_budget_mb << 20,
                         batching=Batching(window=batch_window_ms / 1000, max_rows=batch_rows))
        mode = ("read-only" if access.read_only else "changes need the write key" if access.write_key
                else "changes need the read key" if access.read_key else "open: anyone on this machine may change it")
        click.echo(f"serving {store.ntotal} {store.bits}-bit codes on http://{host}:{port} "
                   f"(search page at /, API docs at /docs; {mode}"
                   f"{', reads need a key' if access.read_key else ''})", err=True)
        server = uvicorn.Server(server_config(app, max_connections, header_timeout))
        # uvicorn stops gracefully on SIGTERM/SIGINT (its shutdown folds the log into the index),
        # then raises the signal again for the handler it found: a no-op one, so that an
        # orderly stop ends with status 0 instead of death by signal.
        previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            with serving_interpreter():
                server.run(sockets=[sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        sock.close()
    if not server.started:
        raise RuntimeError("the HTTP server did not start (see the lines above)")
    click.echo(f"stopped; {index_dir} is saved", err=True)


def _stopped(signum, frame) -> None:
    """Stand-in handler for the signal uvicorn raises again after its shutdown."""


def _loopback(host: str) -> bool:
    """True for a name or address that only this machine reaches (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or one line naming them (a port in use, a bad host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise InputError(f"--host {host}: cannot listen there ({err.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        raise InputError(f"--port {port}: cannot listen on {host}:{port} ({err.strerror})") from None
    sock.set_inheritable(True)
    return sock


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path),
              help="Export directory. [default: RUN_DIR/export, which `--encoder RUN_DIR` finds]")
@click.option("--overwrite", is_flag=True, help="Replace an existing export.")
def export(run_dir: Path, out: Path | None, overwrite: bool) -> None:
    """Export the model of RUN_DIR as ONNX, to encode queries without torch.

    Writes model.onnx (the model, a dynamic batch axis) and export.json (what serving needs:
    the input contract, the image transform, bits and the model's identity).

    `lbhash serve INDEX --encoder EXPORT` and `lbhash search --encoder EXPORT` then encode
    queries with ONNX Runtime and numpy, without torch; the codes equal the run's. Needs the
    'export' extra (pip install 'lbhash[export]')."""
    from lbhash.runs import RunDirectory

    done = RunDirectory(run_dir).export(out, overwrite)
    click.echo(f"exported {run_dir} to {done} (model.onnx, export.json)", err=True)
