"""The HTTP server's own bounds (lbhash.limits): connections, header size, and a header timeout.

uvicorn bounds concurrent connections (`limit_concurrency`: 503 beyond it), header size
(`h11_max_incomplete_event_size`) and idle keep-alive connections, but it waits for a request's
headers for ever: a client that opens connections and sends a byte a minute would hold them
all. `HeaderTimeoutProtocol` closes a connection whose request headers are not complete
`header_timeout` seconds after it opened, or after its previous response.
"""

from __future__ import annotations

from uvicorn.protocols.http.h11_impl import H11Protocol

from lbhash.limits import HEADER_TIMEOUT_S, KEEP_ALIVE_S, MAX_CONNECTIONS, MAX_HEADER_BYTES


def server_config(app, max_connections: int = MAX_CONNECTIONS, header_timeout: float = HEADER_TIMEOUT_S):
    """The uvicorn.Config of `lbhash serve` (its sockets are passed to Server.run)."""
    import uvicorn

    protocol = type("BoundedH11Protocol", (HeaderTimeoutProtocol,), {"header_timeout": header_timeout})
    return uvicorn.Config(app, log_level="warning", http=protocol, limit_concurrency=max_connections,
                          h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_keep_alive=KEEP_ALIVE_S)


class HeaderTimeoutProtocol(H11Protocol):
    header_timeout: float = HEADER_TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._waiting_after:  # a new request's headers are in
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():  # keep-alive: the next request's headers are due in time too
            self._arm_header_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._waiting_after = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
        self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()
