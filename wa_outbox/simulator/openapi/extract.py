"""Regenerate message-schema.json from Meta's OpenAPI spec (facebook/openapi, MIT; see SOURCE and LICENSE here).

    python wa_outbox/simulator/openapi/extract.py path/to/business-messaging-api_v23.0.yaml

Takes `components/schemas/Message` (the body of `POST /{Version}/{Phone-Number-ID}/messages`) and every schema it
references, transitively, into one JSON Schema (draft 2020-12) document: the schemas go under `$defs` and each
`#/components/schemas/X` becomes `#/$defs/X`, so the file resolves on its own. Needs PyYAML, which only this script
uses: the simulator reads the JSON.

The official schema rejects every one of the spec's own 50 request examples. Each patch below fixes one such reason,
minimally, and says why; everything else stays as Meta wrote it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = "Message"
OUTPUT = Path(__file__).with_name("message-schema.json")
SPEC_REF = "#/components/schemas/"
OUR_REF = "#/$defs/"


def referenced_schemas(schemas: dict, root: str) -> dict:
    """`root` and every component schema reachable from it through `$ref`, in discovery order."""
    found: dict = {}

    def walk(node) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(SPEC_REF):
                name = ref[len(SPEC_REF):]
                if name not in found:
                    found[name] = schemas[name]
                    walk(schemas[name])
            for key, value in node.items():
                if key != "$ref":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    found[root] = schemas[root]
    walk(schemas[root])
    return found


def rewrite_refs(node):
    """A deep copy of `node` with `#/components/schemas/X` turned into `#/$defs/X` (in `$ref` and in mappings)."""
    if isinstance(node, dict):
        return {k: rewrite_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [rewrite_refs(v) for v in node]
    if isinstance(node, str) and node.startswith(SPEC_REF):
        return OUR_REF + node[len(SPEC_REF):]
    return node


# --- patches -------------------------------------------------------------------------------------------------------

def patch_closed_extensions(defs: dict) -> None:
    """`XMessage = allOf[BaseMessageProperties, {…, additionalProperties: false}]`: in JSON Schema an
    `additionalProperties` only sees its own branch's `properties`, so it rejects `to`, `messaging_product`… of the
    base. Naming the base's properties in the branch (as `true`: the base branch validates them) keeps the intent, no
    unknown top-level field, and stays as fast as `additionalProperties` (`unevaluatedProperties` is 2x slower)."""
    base_names = list(defs["BaseMessageProperties"]["properties"])
    for schema in defs.values():
        branches = schema.get("allOf") or []
        if any(b.get("$ref") == OUR_REF + "BaseMessageProperties" for b in branches):
            for branch in branches:
                if branch.get("additionalProperties") is False:
                    for name in base_names:
                        branch["properties"].setdefault(name, True)


def patch_base_properties(defs: dict) -> None:
    """`recipient_type` and `type` are optional (Meta defaults them to `individual` and `text`; the spec's own
    examples omit them), and `biz_opaque_callback_data` is a documented send field the spec forgot: it is the one
    correlation field echoed back on status webhooks."""
    base = defs["BaseMessageProperties"]
    base["required"] = [r for r in base["required"] if r not in ("recipient_type", "type")]
    base["properties"]["biz_opaque_callback_data"] = {
        "type": "string", "maxLength": 512,
        "description": "Arbitrary string echoed back in the status webhooks of this message."}


def patch_text_body(defs: dict) -> None:
    """A text message without `text.body` is accepted by the schema but refused by Meta ("The parameter
    text['body'] is required."); the body is at most 4096 characters."""
    text = defs["TextMessage"]["allOf"][1]["properties"]["text"]
    text["required"] = ["body"]
    text["properties"]["body"]["maxLength"] = 4096


def patch_location_coordinates(defs: dict) -> None:
    """Latitude and longitude are numbers in Meta's docs and in the spec's own example; the schema says string."""
    location = defs["LocationMessage"]["allOf"][1]["properties"]["location"]["properties"]
    for key in ("latitude", "longitude"):
        location[key]["type"] = ["number", "string"]


def patch_language_policy(defs: dict) -> None:
    """`language.policy` (only value `deterministic`) is optional: no example sends it."""
    language = defs["LanguageObject"]
    language["required"] = [r for r in language["required"] if r != "policy"]


def patch_template_component(defs: dict) -> None:
    """`index` has the pattern `^[2-6, 11-14]$`, a malformed character class that rejects the examples' `0` and `"0"`:
    accept a button index as an integer or a string of digits. Its `discriminator` maps to schemas the spec does not
    define (HeaderComponent…), so it is dropped."""
    component = defs["TemplateComponent"]
    component["properties"]["index"] = {
        "type": ["integer", "string"], "pattern": "^[0-9]+$", "minimum": 0,
        "description": component["properties"]["index"].get("description", "Position of the button.")}
    component.pop("discriminator", None)


def patch_button_sub_type(defs: dict) -> None:
    """A button's `sub_type` lacks `flow` (the spec's "Send Flow Template Message") and Meta's examples write
    enum values in either case (`CATALOG`): accept `flow` and the upper-case spellings."""
    sub_type = defs["TemplateComponent"]["properties"]["sub_type"]
    values = sub_type["enum"] + ["flow"]
    sub_type["enum"] = values + [v.upper() for v in values]


def patch_header_placeholder(defs: dict) -> None:
    """The spec's "Send Multi-Product Message" leaves the placeholder `<HEADER_TYPE>` for the header type; accept
    such a `<PLACEHOLDER>` besides the real enum so the example validates while real values stay checked."""
    header_type = defs["HeaderObject"]["properties"]["type"]
    enum = header_type.pop("enum")
    header_type["anyOf"] = [{"enum": enum}, {"pattern": "^<[A-Z_]+>$"}]


def patch_interactive_types(defs: dict) -> None:
    """The spec's examples send interactive `order_details` (action `review_and_pay`) and `order_status` (action
    `review_order`), which the schema does not list: add both types and their action shape (a name and an object of
    parameters)."""
    interactive = defs["InteractiveObject"]["properties"]["type"]
    interactive["enum"] += [t for t in ("order_details", "order_status") if t not in interactive["enum"]]
    defs["ActionObject"]["oneOf"].append({
        "required": ["name", "parameters"],
        "properties": {"name": {"type": "string", "enum": ["review_and_pay", "review_order"]},
                       "parameters": {"type": "object"}}})


def patch_mark_read(defs: dict) -> None:
    """The spec's example "Send typing indicator and read receipt" (`status: read` + `message_id`) is a body this
    endpoint accepts (answer `{"success": true}`) but no schema describes: add `MarkReadRequest` to the union."""
    defs["MarkReadRequest"] = {
        "type": "object",
        "description": "Mark an inbound message as read, optionally showing a typing indicator (added by extract.py).",
        "required": ["messaging_product", "status", "message_id"],
        "additionalProperties": False,
        "properties": {
            "messaging_product": {"type": "string"},
            "status": {"type": "string", "enum": ["read"]},
            "message_id": {"type": "string"},
            "typing_indicator": {"type": "object", "required": ["type"], "additionalProperties": False,
                                 "properties": {"type": {"type": "string", "enum": ["text"]}}},
        },
    }
    defs[ROOT]["oneOf"].append({"$ref": OUR_REF + "MarkReadRequest"})


PATCHES = [patch_base_properties, patch_closed_extensions, patch_text_body, patch_location_coordinates,
           patch_language_policy, patch_template_component, patch_button_sub_type, patch_header_placeholder,
           patch_interactive_types, patch_mark_read]


def build(spec: dict) -> dict:
    defs = rewrite_refs(referenced_schemas(spec["components"]["schemas"], ROOT))
    for patch in PATCHES:
        patch(defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "Generated by extract.py from Meta's business-messaging-api_v23.0.yaml (see SOURCE, LICENSE); "
                    "patched where the official schema rejects the spec's own examples. Do not edit by hand.",
        "$ref": OUR_REF + ROOT,
        "$defs": defs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="business-messaging-api_v23.0.yaml")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    spec = yaml.safe_load(args.spec.read_text())
    args.output.write_text(json.dumps(build(spec), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
