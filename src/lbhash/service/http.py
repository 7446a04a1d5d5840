"""The HTTP server's own bounds (lbhash.limits): connections, header size, and a header timeout.

httptools (docs/results/search-benchmarks.md, "The service's own cost") bounds neither a request's header size nor
the time its headers take: `BoundedHttpToolsProtocol` answers 400 and closes past either.
`serving_interpreter` sets the interpreter up for a server while it runs.
"""

from __future__ import annotations

import gc
import sys
from contextlib import contextmanager

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from lbhash.limits import HEADER_TIMEOUT_S, KEEP_ALIVE_S, MAX_CONNECTIONS, MAX_HEADER_BYTES


# A search runs without the GIL; the thread it ran on then waits for the GIL while the event
# loop holds it, until the interpreter's switch interval forces a switch: a shorter interval
# gave the lower p99 (docs/results/search-benchmarks.md, "The GIL's switch interval").
SWITCH_INTERVAL_S = 0.0005


# Full collections scan every long-lived object that start-up made, find nothing to free and
# hold the GIL meanwhile, which made the p99 under load: what start-up made is frozen out of the
# collector's scans, and a full collection waits for more middle-generation collections
# (docs/results/search-benchmarks.md, "The garbage collector": the freeze and its measurements).
FULL_COLLECTION_AFTER = 100


@contextmanager
def serving_interpreter(switch_interval: float = SWITCH_INTERVAL_S, full_collection_after: int = FULL_COLLECTION_AFTER):
    """While the server runs: the GIL's switch interval `switch_interval`, everything alive at
    its start frozen (`gc.freeze`), and a full collection only after `full_collection_after`
    collections of the middle generation. All three are restored when it ends."""
    previous_interval, previous_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(switch_interval)
    gc.freeze()
    gc.set_threshold(previous_threshold[0], previous_threshold[1], full_collection_after)
    try:
        yield
    finally:
        gc.set_threshold(*previous_threshold)
        gc.unfreeze()
        sys.setswitchinterval(previous_interval)


def server_config(app, max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT_S):
    """The uvicorn.Config of `lbhash serve` (its sockets are passed to Server.run)."""
    import uvicorn

    protocol = type("ServeProtocol", (BoundedHttpToolsProtocol,), {"header_timeout": header_timeout})
    return uvicorn.Config(app, log_level="warning", http=protocol, limit_concurrency=max_connections,
                          timeout_keep_alive=KEEP_ALIVE_S)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    header_timeout: float = HEADER_TIMEOUT_S
    max_header_bytes: int = MAX_HEADER_BYTES

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._awaiting_headers, self._header_bytes = True, 0
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        # llhttp keeps an unfinished header line in memory: the count bounds it, a chunk at most late
        if self._awaiting_headers and self._header_bytes > self.max_header_bytes and not self.transport.is_closing():
            self._cancel_header_timer()
            self.send_400_response(f"Request headers larger than {self.max_header_bytes} bytes.")

    def on_headers_complete(self) -> None:
        self._awaiting_headers, self._header_bytes = False, 0
        self._cancel_header_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers = True  # what follows on this connection is the next request's headers

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():  # keep-alive: the next request's headers are due in time too
            self._arm_header_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        if self._awaiting_headers:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._awaiting_headers and not self.transport.is_closing():
            self.transport.close()
