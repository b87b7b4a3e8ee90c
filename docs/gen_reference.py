"""The documentation's generated references, written from the code rather than by hand.

- `http_api(document)`: the /v1 HTTP API from wa_outbox/web/openapi.json (operations, parameters, request and
  response bodies, then every component schema);
- `environment(source)`: the environment variables from wa_outbox/config.py. Every `_parse(env, "NAME", default,
  convert, "what")` and `env.get("NAME", …)` of `Settings.from_env` is found by parsing the module (so a new `_parse`
  line appears without anything else to edit); the default is what `Settings.from_env({})` holds for that field; the
  meaning is the field's own comment in `Settings`, or the line of docs/environment.yml for that name when there is
  one (who reads it and a longer meaning). Names the module mentions elsewhere (read by a helper) are listed too.

docs/hooks.py adds the pages to the MkDocs build; tests/system/test_docs_build.py checks that they name every route,
variable and CLI command. Plain functions of their input: no file is written here.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wa_outbox.config import Settings

ROOT = Path(__file__).resolve().parent.parent
OPENAPI = ROOT / "wa_outbox" / "web" / "openapi.json"
CONFIG = ROOT / "wa_outbox" / "config.py"
ENV_NOTES = ROOT / "docs" / "environment.yml"

# The names config.py mentions outside `_parse`/`env.get` calls (a helper reads them; an error message names them).
ENV_NAME = re.compile(r"\b(?:WA_OUTBOX_[A-Z0-9_]+|WHATSAPP_[A-Z0-9_]+|DATABASE_URL|LOG_LEVEL|LOG_FORMAT|PORT|"
                      r"WEB_CONCURRENCY)\b")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def cell(text: Any) -> str:
    """Text fit for one cell of a markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


# --- the HTTP API -----------------------------------------------------------------------------------------------


def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while isinstance(node, dict) and "$ref" in node:
        path = node["$ref"].removeprefix("#/").split("/")
        target: Any = document
        for part in path:
            target = target[part]
        node = target
    return node


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref", "") if isinstance(node, dict) else ""
    return ref.rsplit("/", 1)[-1] if ref.startswith("#/components/schemas/") else None


def schema_type(document: dict[str, Any], schema: dict[str, Any]) -> str:
    """A schema in a few words: a link to a named schema, `array of …`, the type with its constraints."""
    name = _ref_name(schema)
    if name:
        return f"[`{name}`](#schema-{name.lower()})"
    schema = _resolve(document, schema)
    for combinator in ("oneOf", "anyOf", "allOf"):
        if combinator in schema:
            joiner = " and " if combinator == "allOf" else " or "
            return joiner.join(schema_type(document, s) for s in schema[combinator])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        kind = " or ".join(kind)
    if kind == "array" and "items" in schema:
        text = f"array of {schema_type(document, schema['items'])}"
    else:
        text = f"`{kind}`"
    facts = []
    if "enum" in schema:
        facts.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]))
    if "const" in schema:
        facts.append(f"`{json.dumps(schema['const'])}`")
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"), ("maxLength", "length ≤"),
                      ("minItems", "items ≥"), ("maxItems", "items ≤")):
        if key in schema:
            facts.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        facts.append(f"pattern `{schema['pattern']}`")
    if "format" in schema:
        facts.append(f"format `{schema['format']}`")
    if "default" in schema:
        facts.append(f"default `{json.dumps(schema['default'])}`")
    return text + (f" ({'; '.join(facts)})" if facts else "")


def _rows(document: dict[str, Any], schema: dict[str, Any], prefix: str) -> list[str]:
    """One row per property; an inline object's own properties follow it as `parent.child`."""
    schema = _resolve(document, schema)
    required = set(schema.get("required") or ())
    rows = []
    for name, prop in (schema.get("properties") or {}).items():
        described = _resolve(document, prop) if not _ref_name(prop) else prop
        rows.append(f"| `{prefix}{name}` | {cell(schema_type(document, prop))} | "
                    f"{'yes' if name in required else 'no'} | {cell(described.get('description', ''))} |")
        if not _ref_name(prop) and described.get("properties"):
            rows += _rows(document, described, f"{prefix}{name}.")
    return rows


def _properties(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    rows = _rows(document, schema, "")
    return ["| field | type | required | description |", "|---|---|---|---|", *rows] if rows else []


def _body(document: dict[str, Any], content: dict[str, Any]) -> list[str]:
    lines = []
    for media, described in content.items():
        schema = described.get("schema", {})
        lines.append(f"`{media}`: {schema_type(document, schema)}")
        if not _ref_name(schema):
            table = _properties(document, schema)
            if table:
                lines += ["", *table]
        lines.append("")
    return lines


def http_api(document: dict[str, Any]) -> str:
    info = document.get("info", {})
    out = ["# HTTP API reference", "",
           "<!-- Generated by docs/gen_reference.py from wa_outbox/web/openapi.json: edit that file, not this page. "
           "-->",
           "", f"Generated from `wa_outbox/web/openapi.json` (OpenAPI {document.get('openapi', '')}, served at "
           "`GET /v1/openapi.json`). " + info.get("summary", ""), "",
           info.get("description", "").replace("docs/http-api.md", "[HTTP API](../http-api.md)"), ""]
    default_security = document.get("security")
    schemes = document.get("components", {}).get("securitySchemes", {})
    for path, item in document.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method in METHODS:
            if method not in item:
                continue
            op = item[method]
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                out += [f"**{op['summary']}**" + (f" (`{op['operationId']}`)" if op.get("operationId") else ""), ""]
            if op.get("description"):
                out += [op["description"], ""]
            security = op.get("security", default_security)
            if security:
                names = [name for requirement in security for name in requirement]
                out += ["Authentication: " + ", ".join(
                    f"{name} ({schemes.get(name, {}).get('description', '').rstrip('.')})".replace(" ()", "")
                    for name in names) + ".", ""]
            elif security == []:
                out += ["Authentication: none.", ""]
            parameters = [_resolve(document, p) for p in [*shared, *op.get("parameters", [])]]
            if parameters:
                out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
                for p in parameters:
                    out.append(f"| `{p['name']}` | {p['in']} | {cell(schema_type(document, p.get('schema', {})))} | "
                               f"{'yes' if p.get('required') else 'no'} | {cell(p.get('description', ''))} |")
                out.append("")
            if "requestBody" in op:
                body = _resolve(document, op["requestBody"])
                out += ["Request body" + (" (required)" if body.get("required") else "") + ":", ""]
                out += _body(document, body.get("content", {}))
            out += ["| status | description | body |", "|---|---|---|"]
            for status, response in op.get("responses", {}).items():
                response = _resolve(document, response)
                bodies = [schema_type(document, c.get("schema", {})) for c in response.get("content", {}).values()]
                headers = ", ".join(f"`{h}`" for h in response.get("headers", {}))
                description = response.get("description", "") + (f" Headers: {headers}." if headers else "")
                out.append(f"| {status} | {cell(description)} | {cell(', '.join(bodies))} |")
            out.append("")
            for status, response in op.get("responses", {}).items():  # inline bodies: their fields
                for media, described in _resolve(document, response).get("content", {}).items():
                    table = [] if _ref_name(described.get("schema", {})) else _properties(document, described["schema"])
                    if table:
                        out += [f"Response {status} (`{media}`):", "", *table, ""]
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### `{name}` {{#schema-{name.lower()}}}", ""]
            if schema.get("description"):
                out += [schema["description"], ""]
            table = _properties(document, schema)
            out += (table + [""]) if table else [f"{schema_type(document, schema)}", ""]
    return "\n".join(out).rstrip() + "\n"


def routes(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Every (METHOD, path) of the document."""
    return [(m.upper(), path) for path, item in document.get("paths", {}).items() for m in METHODS if m in item]


# --- the environment --------------------------------------------------------------------------------------------


@dataclass
class Variable:
    name: str
    field: str | None          # the Settings field it sets
    what: str                  # the accepted values, as the start-up error says them
    secret: bool = False       # named without its value in errors


def _comments(source: str) -> dict[int, str]:
    """Line number → the comment on that line."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def field_comments(source: str) -> dict[str, str]:
    """Each Settings field's comment: the one at the end of its line, else the comment lines just above it."""
    tree = ast.parse(source)
    comments = _comments(source)
    lines = source.splitlines()
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Settings":
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    line = statement.lineno
                    text = comments.get(statement.end_lineno or line, "")
                    if not text:
                        above = []
                        index = line - 1
                        while index >= 1 and lines[index - 1].strip().startswith("#"):
                            above.insert(0, comments.get(index, ""))
                            index -= 1
                        text = " ".join(above)
                    found[statement.target.id] = text
    return found


def _name_of(call: ast.Call) -> str | None:
    """The variable a `_parse(env, "NAME", …)` or `env.get("NAME", …)` call reads."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "_parse" and len(call.args) >= 2:
        arg = call.args[1]
    elif isinstance(func, ast.Attribute) and func.attr == "get" and call.args:
        arg = call.args[0]
    else:
        return None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]*", arg.value):
        return arg.value
    return None


def variables(source: str) -> list[Variable]:
    """Every environment variable config.py reads, in the order Settings.from_env reads them, then the names it
    mentions elsewhere (read by a helper, such as WA_OUTBOX_VALIDATE)."""
    tree = ast.parse(source)
    found: dict[str, Variable] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "from_env":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and call.args == [] and call.keywords and isinstance(call.func, ast.Name):
                    for keyword in call.keywords:
                        _collect(keyword.value, keyword.arg, found)
    for call in ast.walk(tree):  # _parse / env.get calls outside from_env
        if isinstance(call, ast.Call):
            _collect(call, None, found)
    for name in ENV_NAME.findall(source):
        found.setdefault(name, Variable(name, None, ""))
    return list(found.values())


def _collect(value: ast.AST, field: str | None, found: dict[str, Variable]) -> None:
    for call in ast.walk(value):
        if not isinstance(call, ast.Call):
            continue
        name = _name_of(call)
        if name is None or name in found:
            continue
        is_parse = isinstance(call.func, ast.Name) and call.func.id == "_parse"
        what, secret = ("" if is_parse else "any string"), False
        if is_parse:
            if len(call.args) >= 5 and isinstance(call.args[4], ast.Constant):
                what = str(call.args[4].value)
            for keyword in call.keywords:
                if keyword.arg == "shown" and isinstance(keyword.value, ast.Name) and keyword.value.id == "_secret":
                    secret = True
        found[name] = Variable(name, field, what, secret)


def _default_text(value: Any) -> str:
    if value is None or value == () or value == "":
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`" + ",".join(map(str, value)) + "`"
    if isinstance(value, float) and value.is_integer():
        return f"`{value:g}`"
    return f"`{value}`"


def environment(source: str, defaults: dict[str, Any], notes: dict[str, dict[str, str]]) -> str:
    """The page: `defaults` is Settings.from_env({}) as a dict (field → value), `notes` docs/environment.yml."""
    comments = field_comments(source)
    out = ["# Environment variables", "",
           "<!-- Generated by docs/gen_reference.py from wa_outbox/config.py and docs/environment.yml. -->", "",
           "Generated from `wa_outbox/config.py`: every variable `Settings.from_env` reads, in its order, with the "
           "default it takes when unset or empty. Configuration is read from the environment only and validated at "
           "start-up: a missing or malformed variable stops the process with one line naming it and what is wrong "
           "(exit status 2 for gunicorn), never a traceback. Secrets never appear in logs or in these messages: a "
           "variable that can hold one is named without its value, and a URL is shown with its password replaced "
           "by `***`.", "",
           "| variable | used by | default | accepted | meaning |", "|---|---|---|---|---|"]
    for var in variables(source):
        note = notes.get(var.name, {})
        default = note.get("default") or (_default_text(defaults[var.field]) if var.field in defaults else "—")
        meaning = note.get("meaning") or (comments.get(var.field, "") if var.field else "")
        what = var.what + (" (secret: never shown)" if var.secret else "")
        out.append(f"| `{var.name}` | {cell(note.get('used_by', '—'))} | {cell(default)} | {cell(what)} | "
                   f"{cell(meaning)} |")
    out += ["", "A worker also requires `WA_OUTBOX_LEASE_SECONDS` to exceed `WA_OUTBOX_CONNECT_TIMEOUT` + "
            "`WA_OUTBOX_SEND_TIMEOUT` + 5 s. Variables the web process needs (`DATABASE_URL`, `WHATSAPP_APP_SECRET`, "
            "`WHATSAPP_VERIFY_TOKEN`, `WA_OUTBOX_API_TOKENS`) and those the worker needs (`DATABASE_URL`, "
            "`WHATSAPP_ACCESS_TOKEN`, `WHATSAPP_PHONE_NUMBER_ID`) stop that process at start-up when unset."]
    return "\n".join(out) + "\n"


def load_notes(path: Path = ENV_NOTES) -> dict[str, dict[str, str]]:
    import yaml  # noqa: PLC0415 - pyyaml is in the docs extra: http_api() and environment() do without it

    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def environment_page(config_path: Path = CONFIG, notes_path: Path = ENV_NOTES,
                     settings_from_env: Callable[[dict[str, str]], Any] | None = None) -> str:
    if settings_from_env is None:
        settings_from_env = Settings.from_env
    defaults = dataclasses.asdict(settings_from_env({}))
    return environment(config_path.read_text(encoding="utf-8"), defaults, load_notes(notes_path))


def http_api_page(path: Path = OPENAPI) -> str:
    return http_api(json.loads(path.read_text(encoding="utf-8")))
