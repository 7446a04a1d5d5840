"""Who may read and change a served index: keys, read-only mode and cross-site requests (docs/service.md,
"Exposing the service").

- `Access(write_key, read_key, read_only)`: with a write key every change must carry it in the
  `X-Lbhash-Key` header (401 otherwise), with a read key so must every other API request (and every
  change, where there is no write key: a change needs at least what a read needs); the
  page, its assets, /health and the API docs stay open. Keys are compared in constant time and
  never logged. `read_only`: every change gets 403.
- A change a browser sends from another site (`Sec-Fetch-Site`, else `Origin` against the
  request's host) is refused (403) whatever the keys, as Go's `CrossOriginProtection` does;
  CORS stays closed.
- What a change is, the routes declare (`changes_data` or `reads_data`, a dependency of the route):
  `create_app` collects the routes that declare `changes_data` (`change_routes`) for the checks above
  and refuses to start with a route of another method than GET that declares neither.
- Every request must name this server in its `Host` header (`Access.allowed_hosts`, a `HostNames`:
  localhost, any IP address, the name it listens as, `--allowed-hosts`), else 403 (400 without one),
  against DNS rebinding.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from lbhash.errors import InputError
from lbhash.limits import MAX_KEY_FILE_BYTES

KEY_HEADER = "X-Lbhash-Key"
# the headers the checks read, which a request may give once each (ASGI names are lower case)
_ONCE = frozenset({b"host", b"origin", b"sec-fetch-site", KEY_HEADER.lower().encode()})
ENV_WRITE_KEY, ENV_READ_KEY = "LBHASH_WRITE_KEY", "LBHASH_READ_KEY"
ENV_ALLOWED_HOSTS = "LBHASH_ALLOWED_HOSTS"
_READ_METHODS = frozenset({"GET", "HEAD"})
_OPEN = re.compile(r"^(/|/page/[^/]+|/health|/docs|/docs-assets/[^/]+|/docs/oauth2-redirect|/redoc|/openapi\.json)$")
MIN_KEY_CHARS = 16


_NAME = re.compile(r"^\.?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")


@dataclass(frozen=True)
class HostNames:
    """The names a request's `Host` may give (see the module docstring): `localhost`, any IP
    address, and `names`, where ".example.com" stands for example.com and every name under it."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names=(), where: str = "allowed hosts") -> "HostNames":
        """Checked names: host names only (no port, scheme, path or wildcard), one line naming
        `where` and the value otherwise."""
        out = set()
        for name in names:
            text = str(name).strip().lower()
            if not _NAME.match(text):
                raise InputError(f"{where}: {str(name)!r} is not an allowed host name (a name such as "
                                 "search.example or .example.com for a domain and the names under it; no "
                                 "scheme, port, path or wildcard)")
            out.add(text.rstrip("."))
        return cls(frozenset(out))

    @classmethod
    def for_server(cls, host: str, given=()) -> "HostNames":
        """The names of `lbhash serve --host HOST [--allowed-hosts ...]`: the --host when it is a
        name, and the --allowed-hosts (comma-separated, repeatable) or else LBHASH_ALLOWED_HOSTS."""
        where, text = ("--allowed-hosts", ",".join(given)) if given else \
            (ENV_ALLOWED_HOSTS, os.environ.get(ENV_ALLOWED_HOSTS, ""))
        values = [v for v in text.split(",") if v.strip()]
        if given and not values:
            raise InputError(f"--allowed-hosts {text!r}: no allowed host name given")
        names = cls.of(values, where).names
        if _address(host) is None and _NAME.match(host.strip().lower()):
            names |= cls.of([host], "--host").names
        return cls(names)

    def allows(self, host: str | None) -> bool:
        """Whether a `Host` header names this server."""
        return host is not None and _allowed(self.names, host)


@dataclass(frozen=True)
class Access:
    """The keys, the read-only mode and `allowed_hosts`: the names besides localhost and IP addresses
    that a request's `Host` may give (a `HostNames`, or names that `HostNames.of` checks)."""

    write_key: str | None = None
    read_key: str | None = None
    read_only: bool = False
    allowed_hosts: HostNames = HostNames()

    def __post_init__(self) -> None:
        for name, key in (("write key", self.write_key), ("read key", self.read_key)):
            # ASCII only: a header's bytes are read as Latin-1, a browser sends no other, curl sends UTF-8, so a
            # key of other characters would match for some clients and not others
            if key is not None and (len(key) < MIN_KEY_CHARS or not key.isprintable() or key != key.strip()
                                    or not key.isascii()):
                raise InputError(f"the {name} must be at least {MIN_KEY_CHARS} printable ASCII characters without "
                                 "surrounding spaces")
        if not isinstance(self.allowed_hosts, HostNames):
            object.__setattr__(self, "allowed_hosts", HostNames.of(self.allowed_hosts))

    def __repr__(self) -> str:  # never print a key
        return (f"Access(write_key={'set' if self.write_key else None}, "
                f"read_key={'set' if self.read_key else None}, read_only={self.read_only}, "
                f"allowed_hosts={sorted(self.allowed_hosts.names)})")

    @property
    def open_for_writes(self) -> bool:
        """Anyone who reaches the port may change the index (no key at all: a read key alone guards changes too)."""
        return not self.read_only and self.write_key is None and self.read_key is None

    def public(self) -> dict:
        """What the page may know: which keys are needed, never the keys."""
        return {"read_only": self.read_only, "write_key": self.write_key is not None,
                "read_key": self.read_key is not None}


def access_from_environment(read_only: bool = False, write_key_file: Path | None = None,
                            read_key_file: Path | None = None) -> Access:
    """Keys from a file (its first line; a regular file of at most MAX_KEY_FILE_BYTES) or else
    from LBHASH_WRITE_KEY / LBHASH_READ_KEY (set but empty is refused, never read as no key)."""
    return Access(write_key=_key(write_key_file, ENV_WRITE_KEY, "--write-key-file"),
                  read_key=_key(read_key_file, ENV_READ_KEY, "--read-key-file"), read_only=read_only)


def _key(path: Path | None, env: str, option: str) -> str | None:
    if path is None:
        value = os.environ.get(env)
        if value is not None and not value.strip():  # set but empty: never "no key", an open server
            raise InputError(f"{env} is set but empty: set a key of at least {MIN_KEY_CHARS} printable ASCII characters, "
                             "or unset it")
        return value
    lines = _read_key_file(Path(path), option).splitlines()
    if not lines or not lines[0]:
        raise InputError(f"{option} {path}: the file's first line holds no key")
    return lines[0]


def _read_key_file(path: Path, option: str) -> str:
    """A key file's text: a regular file (or a link to one) of at most MAX_KEY_FILE_BYTES, checked on
    the open file, opened without blocking (a FIFO would wait forever, /dev/zero fill memory)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"{option} {path}: cannot read the key ({err.__class__.__name__})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{option} {path}: not a regular file (a key file is a file whose first line is the key)")

        data = b""
        while len(data) <= MAX_KEY_FILE_BYTES:
            chunk = os.read(fd, MAX_KEY_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise InputError(f"{option} {path}: more than {MAX_KEY_FILE_BYTES} bytes (a key file is a file whose first "
                         "line is the key)")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{option} {path}: cannot read the key (UnicodeDecodeError)") from None
    if mode & 0o077:  # as ssh says of a private key: others on the machine can read it
        import warnings

        from lbhash.errors import LbhashWarning

        warnings.warn(f"{option} {path}: others on this machine may read or change the key (mode "
                      f"{stat.S_IMODE(mode):o}); chmod 600 it", LbhashWarning, stacklevel=3)
    return text


@functools.lru_cache(maxsize=256)  # a server sees a few Host values: each is parsed once
def _allowed(names: frozenset[str], host: str) -> bool:
    name = _host_name(host)
    if name is None:
        return False
    if name == "localhost" or _address(name) is not None or name in names:
        return True
    return any(n.startswith(".") and (name == n[1:] or name.endswith(n)) for n in names)


def _host_name(host: str) -> str | None:
    """The name of a `Host` header, lower case, without port and trailing dot (None: malformed)."""
    host = host.strip().lower()
    if host.startswith("["):  # [IPv6]:port
        end = host.find("]")
        rest = host[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return host[1:end] if _address(host[1:end]) is not None else None
    name, colon, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    if colon and not port.isdigit():
        return None
    name = name.rstrip(".")
    return name if name and _NAME.match(name) and not name.startswith(".") else None


def _address(text: str):
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


class AccessControl:
    """ASGI middleware applying an `Access`, its `allowed_hosts` among it, to every HTTP request (see
    the module docstring)."""

    def __init__(self, app, access: Access, state):
        self.app, self.access, self.state = app, access, state  # state.change_routes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refusal = self.host_refusal(scope) or self.refusal(scope)
            if refusal is not None:
                status, detail = refusal
                headers = {"WWW-Authenticate": f'{KEY_HEADER} realm="lbhash"'} if status == 401 else None
                await JSONResponse({"detail": detail}, status_code=status, headers=headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def host_refusal(self, scope) -> tuple[int, str] | None:
        names = [k for k, _ in scope["headers"] if k in _ONCE]
        if len(names) != len(set(names)):
            # the Host check read the first, the key and cross-site checks the last: a request that
            # names two is refused rather than resolved either way
            twice = next(n for n in names if names.count(n) > 1)
            return 400, f"a request may have one {twice.decode('latin-1')} header, not {names.count(twice)}"
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        if self.access.allowed_hosts.allows(host):
            return None
        if host is None or not host.strip():
            return 400, "a request must name this server in its Host header"
        shown = host if host.isprintable() and len(host) <= 200 else repr(host[:200])
        return 403, (f"Host {shown} is not a name of this server (refused against DNS rebinding); if it is one, "
                     f"start the server with --allowed-hosts NAME (or {ENV_ALLOWED_HOSTS})")

    def refusal(self, scope) -> tuple[int, str] | None:
        method, path, access = scope["method"], scope["path"], self.access
        changes = any(method == changing and pattern.match(path) for changing, pattern in self.state.change_routes)
        if not changes and (access.read_key is None or _OPEN.match(path)):
            return None  # a read of an open service: every search passes here, so nothing is decoded
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        given = headers.get(KEY_HEADER.lower())
        if changes:
            if _cross_site(headers):
                return 403, "a change from another web site is refused (the browser's Sec-Fetch-Site or Origin)"
            if access.read_only:
                return 403, "this service is read-only (lbhash serve --read-only): it accepts no changes"
            if access.write_key is not None and not _same(given, access.write_key):
                return 401, f"a change needs the write key in the {KEY_HEADER} header"
            if access.write_key is None and access.read_key is not None and not _same(given, access.read_key):
                # with a read key alone a change needs it too: a change needs at least what a read needs
                return 401, f"a change needs the read key in the {KEY_HEADER} header (this service has no write key)"
            return None
        if not (_same(given, access.read_key) or (access.write_key is not None and _same(given, access.write_key))):
            return 401, f"this service needs its read key in the {KEY_HEADER} header"
        return None


async def changes_data() -> None:
    """A route's declaration that it changes the index (`dependencies=[Depends(changes_data)]`): the
    write key, the read-only mode and the cross-site check apply to it."""


async def reads_data() -> None:
    """A route's declaration that it changes nothing though its method is not GET (a search with a body)."""


def change_routes(routes) -> tuple[tuple[str, re.Pattern], ...]:
    """(method, path pattern) of each route that declares `changes_data`. A route of another method than
    GET or HEAD that declares neither `changes_data` nor `reads_data` is refused (RuntimeError naming it):
    a change endpoint left undeclared would pass with the read key alone."""
    changes = []
    for route in _every_route(routes):
        if not isinstance(route, APIRoute):  # (the page's static files: Starlette's own GET routes)
            continue
        declared = {dependency.call for dependency in route.dependant.dependencies}
        if changes_data in declared:
            changes += [(method, route.path_regex) for method in sorted(route.methods)]
        elif reads_data not in declared and not route.methods <= _READ_METHODS:
            raise RuntimeError(f"route {', '.join(sorted(route.methods))} {route.path} declares neither "
                               "Depends(changes_data) nor Depends(reads_data) (lbhash.service.access)")
    return tuple(changes)


def _every_route(routes):
    """The routes, those of included routers among them (FastAPI 0.165 keeps an included router whole,
    its routes under `original_router`; the service includes its routers without a prefix)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _every_route(inner.routes)
        else:
            yield route


def _same(given: str | None, key: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), key.encode())


def _cross_site(headers: dict[str, str]) -> bool:
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None:
        return False  # not a browser, or a browser's same-origin GET
    parts = urlsplit(origin)
    return origin == "null" or parts.netloc.lower() != headers.get("host", "").lower()
