"""What a `POST /{version}/{phone_number_id}/messages` body is, and whether Meta would take it: the one checker both
the simulator (wa_outbox/simulator/core.py) and the opt-in enqueue check (wa_outbox/meta_schema.py) use, so the
enqueue path never imports the simulator.

The body is checked against Meta's own schema (wa_outbox/simulator/openapi/message-schema.json, extracted and patched
by openapi/extract.py beside it: data the package ships, read here, not imported). Instead of the schema's eleven-way
`oneOf`, which makes jsonschema report "is not valid under any of the given schemas", the body is dispatched on `type`
as the spec's discriminator says and checked against that one branch: faster, and the error names the field that is
wrong, as Meta's `error_data.details` does.

Two rules of Meta's message reference are not JSON Schema: at most 10 rows in a list message across all its
sections (a refusal, #100), and media Meta cannot fetch (a link to a host no server outside the sender's network
reaches: Meta accepts the send, then reports it `failed` with 131053, as it downloads media after answering).

Schema validation can be switched off to measure the transport alone; the few checks the simulator itself needs
(a JSON object, a `to` with digits, a known `type`) always run.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

SCHEMA_PATH = Path(__file__).with_name("simulator") / "openapi" / "message-schema.json"

_NON_DIGITS = re.compile(r"[^0-9]")
_TYPE_NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
               "object": "an object", "array": "an array"}
_BOUNDS = {"maxLength": "must be at most {} characters long", "minLength": "must be at least {} characters long",
           "maxItems": "must have at most {} items", "minItems": "must have at least {} items",
           "maximum": "must be at most {}", "minimum": "must be at least {}"}
MAX_LIST_ROWS = 10  # "You can have a total of 10 rows across your sections" (interactive list messages)
MEDIA_DOWNLOAD_FAILED = 131053  # Meta's "Media upload error": the media could not be downloaded
# Names no public resolver answers (RFC 2606, RFC 6761, RFC 6762): Meta's servers cannot fetch from them.
_UNREACHABLE_SUFFIXES = (".invalid", ".test", ".localhost", ".local", ".internal")


class InvalidRequest(ValueError):
    """Meta would answer `(#100) Invalid parameter`; the message is the `error_data.details`."""


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    kind: str  # "message": a send to a recipient | "mark_read": a read receipt / typing indicator
    type: str | None
    to: str | None
    wa_id: str | None
    biz_opaque_callback_data: str | None
    failure_code: int | None = None  # accepted, but it will end `failed` with this code (never delivered)


class RequestChecker:
    """Parses and (optionally) schema-validates request bodies. Thread-safe: validators hold no per-call state."""

    def __init__(self, schema_path: Path = SCHEMA_PATH):
        document = json.loads(schema_path.read_text())
        defs = document["$defs"]
        mapping = defs["Message"]["discriminator"]["mapping"]  # type -> "#/$defs/TextMessage"

        def validator(ref: str) -> Draft202012Validator:
            return Draft202012Validator({"$ref": ref, "$defs": defs})

        self._by_type = {message_type: validator(ref) for message_type, ref in mapping.items()}
        self._mark_read = validator("#/$defs/MarkReadRequest")

    @property
    def message_types(self) -> list[str]:
        return sorted(self._by_type)

    def parse(self, body: object, *, validate: bool = True) -> ParsedRequest:
        """Classify `body`; raises InvalidRequest with Meta-style details when it would be refused."""
        if not isinstance(body, dict):
            raise InvalidRequest("The request body must be a JSON object.")
        if "status" in body and "to" not in body and "type" not in body:
            if validate:
                _check(self._mark_read, body)
            return ParsedRequest("mark_read", None, None, None, None)

        message_type = body.get("type")
        if message_type is None:  # Meta's default is text; the spec's examples also omit it beside other objects
            message_type = next((t for t in self._by_type if t in body), "text")
        if not isinstance(message_type, str) or message_type not in self._by_type:
            raise InvalidRequest(f"Param type must be one of {{{', '.join(self.message_types)}}}.")
        if validate:
            _check(self._by_type[message_type], body)
            _check_list_rows(body)
        to = body.get("to")
        if not isinstance(to, str) or not to:
            raise InvalidRequest("The parameter to is required." if to is None else "Param to must be a string.")
        wa_id = _NON_DIGITS.sub("", to)
        if body.get("recipient_type", "individual") == "group":
            wa_id = to
        elif not 1 <= len(wa_id) <= 15:
            raise InvalidRequest(f"Param to must be a phone number in E.164 format, got {to!r}.")
        callback = body.get("biz_opaque_callback_data")
        failure = MEDIA_DOWNLOAD_FAILED if validate and any(map(unreachable_link, _media_links(body))) else None
        return ParsedRequest("message", message_type, to, wa_id, callback if isinstance(callback, str) else None,
                             failure)


def _check_list_rows(body: dict) -> None:
    interactive = body.get("interactive")
    if not isinstance(interactive, dict) or interactive.get("type") != "list":
        return
    sections = (interactive.get("action") or {}).get("sections") or []
    rows = sum(len(s.get("rows") or []) for s in sections if isinstance(s, dict))
    if rows > MAX_LIST_ROWS:
        raise InvalidRequest(f"Param interactive['action']['sections'] must have at most {MAX_LIST_ROWS} rows in "
                             f"total across sections, got {rows}.")


def _media_links(node: object):
    """Every media `link` in a body (message media, interactive and carousel headers, template parameters)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "link" and isinstance(value, str):
                yield value
            else:
                yield from _media_links(value)
    elif isinstance(node, list):
        for value in node:
            yield from _media_links(value)


def unreachable_link(link: str) -> bool:
    """A URL whose host Meta's servers cannot reach: a reserved name or a loopback, private or link-local address."""
    try:
        host = (urlsplit(link).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    if not host or host.startswith("<"):
        return False
    if host == "localhost" or host.endswith(_UNREACHABLE_SUFFIXES):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not address.is_global


def _check(validator: Draft202012Validator, body: dict) -> None:
    error = best_match(validator.iter_errors(body))
    if error is not None:
        raise InvalidRequest(_details(error))


def _details(error: ValidationError) -> str:
    """One sentence naming the offending parameter the way Meta does (`text['body']`)."""
    path = _param(list(error.absolute_path))
    if error.validator == "required":
        missing = next((p for p in error.validator_value if p not in error.instance), error.validator_value[0])
        return f"The parameter {_param([*error.absolute_path, missing])} is required."
    if error.validator == "type" and path:
        given = error.validator_value
        expected: list[str] = given if isinstance(given, list) else [given]
        return f"Param {path} must be {' or '.join(_TYPE_NAMES.get(t, t) for t in expected)}."
    if error.validator == "enum" and path:
        return f"Param {path} must be one of {{{', '.join(map(str, error.validator_value))}}}."
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"Unknown parameter(s): {', '.join(_param([*error.absolute_path, n]) for n in unknown)}."
    if error.validator == "pattern" and "x-details" in error.schema:
        return f"Param {path} {error.schema['x-details']}"
    if error.validator in _BOUNDS:
        return f"Param {path} {_BOUNDS[error.validator].format(error.validator_value)}."
    if error.validator in ("oneOf", "anyOf"):
        forms = list(dict.fromkeys(" and ".join(b["required"]) for b in error.validator_value
                                   if isinstance(b, dict) and "required" in b))
        hint = f" (with {'; or '.join(forms)})" if forms else ""
        return f"Param {path or 'body'} must match exactly one allowed form{hint}."
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"Param {path}: {message}" if path else message


def _param(path: list) -> str:
    """`["text", "body"]` -> `text['body']`, `["template", "components", 0]` -> `template['components'][0]`."""
    if not path:
        return ""
    head, *rest = path
    return str(head) + "".join(f"[{p}]" if isinstance(p, int) else f"['{p}']" for p in rest)
