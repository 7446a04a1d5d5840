"""A JSON request body checked against its model in bounded memory, before pydantic validates it.

pydantic reports every bad element of a list and every unknown key, each error with its location
and input: `POST /search {"codes": [1, 1, ...]}` with 8,000,000 integers took 66 s and 11.5 GB
before its 422, and 1.3 million unknown keys 2.2 GB. `check_body` walks the parsed JSON once
against the model's keys and list fields, naming the first `MAX_ERRORS` errors and counting the
rest (`BodyErrors`, a 422); a body that passes it gives pydantic at most one error per field.
`CheckedBody` runs it on a route's JSON body; the `/search` middleware calls it itself.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Union

from fastapi.routing import APIRoute
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Strict

from lbhash.limits import MAX_BATCH

MAX_ERRORS = 5  # errors named in a 422's one line; the others are counted
# JSON lists a body may hold: a model's list fields nest at most two deep, each at most MAX_BATCH rows (and
# four list fields at most). Counted in the raw bytes before parsing (a bound: '[' in a string counts too):
# 16 MB of one-number rows, [[1],[1],...], parsed to 4 million Python lists, took 1.1 GB before their 400
MAX_LISTS = 4 * (MAX_BATCH + 1)


class BodyErrors(Exception):
    """A body that does not fit its model (HTTP 422): the first errors, and how many in all."""

    def __init__(self, named: list[str], total: int):
        super().__init__(error_line(named, total))


def error_line(named: list[str], total: int) -> str:
    """One line: the named errors, then how many more there are."""
    more = total - len(named)
    return "; ".join(named) + (f"; and {more:,} more errors ({total:,} in all)" if more > 0 else "")


class _Report:
    """Errors as they are found: the first MAX_ERRORS kept as text, the others only counted."""

    def __init__(self):
        self.named: list[str] = []
        self.total = 0

    def add(self, where, message: str) -> None:
        self.total += 1
        if len(self.named) < MAX_ERRORS:
            self.named.append(f"{'.'.join(map(str, where))}: {message}")


def _leaf(annotation) -> tuple[frozenset, str]:
    """(the JSON value types pydantic accepts, its message otherwise) of a list's element type."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *meta = typing.get_args(annotation)
        if any(isinstance(m, Strict) and m.strict for m in meta):
            if base is int:  # (json gives bool for true and false: not an int here)
                return frozenset({int}), "Input should be a valid integer"
            if base is float:  # an integer is a number too
                return frozenset({int, float}), "Input should be a valid number"
    if annotation is str:
        return frozenset({str}), "Input should be a valid string"
    if origin in (Union, types.UnionType):
        parts = [_leaf(a) for a in typing.get_args(annotation)]
        return frozenset().union(*(p[0] for p in parts)), parts[0][1]
    raise TypeError(f"lbhash.service.bodies has no JSON check for list elements of type {annotation!r}")


def list_shapes(model: type[BaseModel]) -> dict[str, tuple[int, frozenset, str]]:
    """Per list field of `model` (None allowed): (lists nested, element types, message)."""
    shapes = {}
    for name, field in model.model_fields.items():
        kind, depth = field.annotation, 0
        if typing.get_origin(kind) in (Union, types.UnionType):
            options = [a for a in typing.get_args(kind) if a is not type(None)]
            kind = options[0] if len(options) == 1 else kind
        while typing.get_origin(kind) is list:
            kind, depth = typing.get_args(kind)[0], depth + 1
        if depth:
            shapes[name] = (depth, *_leaf(kind))
    return shapes


def check_body(data, model: type[BaseModel]) -> None:
    """BodyErrors where parsed JSON `data` holds keys that `model` does not, or list fields whose
    elements are not of its types; each element is looked at once, and only MAX_ERRORS errors are
    kept. Other mistakes (a scalar field, a body that is not an object) are left to pydantic."""
    if not isinstance(data, dict):
        return
    report = _Report()
    fields = model.model_fields
    for key in data:
        if key not in fields:
            report.add(("body", key), "Extra inputs are not permitted")
    for name, (depth, accepted, message) in _shapes(model).items():
        value = data.get(name)
        if value is not None:
            _walk(value, depth, accepted, message, ("body", name), report)
    if report.total:
        raise BodyErrors(report.named, report.total)


def check_lists(raw: bytes) -> None:
    """BodyErrors (a 422) for a raw JSON body holding more than MAX_LISTS lists, before it is parsed."""
    lists = raw.count(b"[")
    if lists > MAX_LISTS:
        raise BodyErrors([f"body: holds {lists:,} JSON lists, more than any request of at most {MAX_BATCH:,} "
                          f"rows a field can ({MAX_LISTS:,}): send the rows in batches of {MAX_BATCH:,}"], 1)


def _walk(value, depth: int, accepted: frozenset, message: str, where: tuple, report: _Report) -> None:
    if type(value) is not list:
        report.add(where, "Input should be a valid list")
        return
    if depth > 1:
        for i, row in enumerate(value):
            _walk(row, depth - 1, accepted, message, (*where, i), report)
    elif not set(map(type, value)) <= accepted:  # (at C speed; element by element only when one is bad)
        for i, item in enumerate(value):
            if type(item) not in accepted:
                report.add((*where, i), message)


_SHAPES: dict[type, dict] = {}


def _shapes(model: type[BaseModel]) -> dict:
    if model not in _SHAPES:
        _SHAPES[model] = list_shapes(model)
    return _SHAPES[model]


def json_content(headers) -> bool:
    """Whether FastAPI would parse a body with these (raw ASGI) headers as JSON: no content type,
    or application/json or application/*+json."""
    value = next((v for k, v in headers if k == b"content-type"), None)
    if value is None:
        return True
    kind = value.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


class CheckedBody(APIRoute):
    """A route whose JSON body (a model of lbhash.service.models) goes through `check_body` before
    FastAPI validates it: a 422 naming the first errors. The body is parsed once: FastAPI reads
    the same request's parsed JSON."""

    def get_route_handler(self):
        handler = super().get_route_handler()
        field = self.body_field
        model = None if field is None else field.field_info.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)
                and model.__module__ == "lbhash.service.models"):
            return handler

        async def checked(request):
            if json_content(request.scope["headers"]) and await request.body():
                try:
                    check_lists(await request.body())
                except BodyErrors as exc:
                    return JSONResponse({"detail": str(exc)}, status_code=422)
                try:
                    data = await request.json()
                except Exception:  # not JSON (or nested too deeply to read): FastAPI's own answer
                    return await handler(request)
                try:
                    check_body(data, model)
                except BodyErrors as exc:
                    return JSONResponse({"detail": str(exc)}, status_code=422)
            return await handler(request)
        return checked
