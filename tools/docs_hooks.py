"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages' generated parts, made from the code at build
time so that they cannot drift from it.

- `<!-- lbhash: cli -->` becomes every command's `--help`, from the click group (lbhash.cli.main), sub-
  commands included, in order.
- `<!-- lbhash: http -->` becomes every route of the service, from its OpenAPI schema (an app made over an
  empty index in a temporary folder: nothing is served), each with its parameters and body.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

CLI, HTTP = "<!-- lbhash: cli -->", "<!-- lbhash: http -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI in markdown:
        markdown = markdown.replace(CLI, cli_reference())
    if HTTP in markdown:
        markdown = markdown.replace(HTTP, http_reference())
    return markdown


def cli_commands():
    """(the command's full name, its --help text) of `lbhash` and every command under it, depth first."""
    import click

    from lbhash.cli import main

    def walk(command, parent, name):
        ctx = click.Context(command, info_name=name, parent=parent)
        yield ctx.command_path, command.get_help(ctx)
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, sub), ctx, sub)

    yield from walk(main, None, "lbhash")


def cli_reference() -> str:
    return "\n".join(f"## `{path}`\n\n```text\n{text}\n```\n" for path, text in cli_commands())


def openapi() -> dict:
    """The service's OpenAPI schema, from an app over an empty index (lbhash.service.app.create_app)."""
    from lbhash.index import CodeIndex
    from lbhash.service.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        CodeIndex(8).save(Path(tmp) / "index")
        return create_app(Path(tmp) / "index").openapi()


def http_routes(schema: dict):
    """(METHOD, path, operation) of every route of `schema`, by path then method."""
    for path in sorted(schema.get("paths", {})):
        for method, operation in sorted(schema["paths"][path].items()):
            yield method.upper(), path, operation


def http_reference() -> str:
    schema = openapi()
    out = []
    for method, path, op in http_routes(schema):
        out.append(f"## `{method} {path}`\n")
        text = (op.get("description") or op.get("summary") or "").strip()
        if text:
            out.append(text + "\n")
        params = op.get("parameters") or []
        if params:
            out.append("| parameter | in | required | type |\n|---|---|---|---|")
            for p in params:
                kind = p.get("schema", {}).get("type") or ", ".join(
                    s.get("type", "?") for s in p.get("schema", {}).get("anyOf", [])) or "-"
                out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | {kind} |")
            out.append("")
        body = (op.get("requestBody") or {}).get("content") or {}
        for media, content in body.items():
            ref = content.get("schema", {}).get("$ref", "")
            shown = ref.rsplit("/", 1)[-1] if ref else json.dumps(content.get("schema", {}))[:200]
            out.append(f"Body: `{media}`, {f'schema `{shown}` (below)' if ref else shown}\n")
    schemas = schema.get("components", {}).get("schemas", {})
    if schemas:
        out.append("## Schemas\n")
        for name in sorted(schemas):
            fields = schemas[name].get("properties", {})
            out.append(f"### `{name}`\n")
            if schemas[name].get("description"):
                out.append(schemas[name]["description"].strip() + "\n")
            if fields:
                out.append("| field | type | default |\n|---|---|---|")
                for field, spec in fields.items():
                    kind = spec.get("type") or ", ".join(s.get("type", s.get("$ref", "?").rsplit("/", 1)[-1])
                                                         for s in spec.get("anyOf", [])) or "-"
                    default = json.dumps(spec["default"]) if "default" in spec else ""
                    out.append(f"| `{field}` | {kind} | {default} |")
                out.append("")
    return "\n".join(out)
