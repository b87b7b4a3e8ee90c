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


# --- patches from Meta's message reference and mainstream clients (issue 11) -------------------------------------
# The spec is narrower than Meta's message reference and than what clients have sent for years; each patch below
# admits one such documented form, or adds one rule of the reference the spec leaves out. The corpus under
# tests/data/send-corpus/ holds a body for each.
MESSAGES_REFERENCE = "https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages"
# A media link Meta can fetch: http(s) only ("Use only with HTTP/HTTPS URLs", MESSAGES_REFERENCE). The spec's own
# examples write the placeholders `http(s)://image-url` and `<http(s)://audio-url>`: accepted as such.
MEDIA_LINK_PATTERN = r"^(?:[Hh][Tt][Tt][Pp][Ss]?|http\(s\))://[^\s]+$|^<[^<>]+>$"
# A media id is what POST /{phone-number-id}/media returns: digits. The examples' `<IMAGE_OBJECT_ID>` is accepted.
MEDIA_ID_PATTERN = r"^[0-9]+$|^<[A-Z_]+>$"
# Words Meta writes in `error_data.details` for these two refusals (seen in client error handling since 2023).
INVALID_URI = "is not a valid URI."
INVALID_MEDIA_ID = "is not a valid whatsapp business account media attachment ID"


def _nullable(schema: dict) -> dict:
    """`schema` or JSON null: mainstream clients (pywa, since 2023) send `null` for an optional field they leave
    empty, and Meta treats it as absent."""
    if "$ref" in schema:
        return {"anyOf": [{"type": "null"}, schema]}
    result = dict(schema)
    kinds = result.get("type")
    if kinds is not None:
        result["type"] = [*(kinds if isinstance(kinds, list) else [kinds]), "null"]
    if "enum" in result:
        result["enum"] = [*result["enum"], None]
    return result


def patch_template_component_types(defs: dict) -> None:
    """Component `type` in upper case (`HEADER`, `BODY`, `BUTTON`) is the common client default and Meta's own
    template guides write it so; `carousel` (media card carousel templates) and `limited_time_offer` are documented
    components the spec lacks. Button `sub_type`s the spec lacks: `copy_code` (coupon and OTP copy-code), `mpm`
    (multi-product), `spm` (single-product), `voice_call` and `order_details`.
    https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-message-templates
    https://developers.facebook.com/docs/whatsapp/business-management-api/message-templates/media-card-carousel-templates
    https://developers.facebook.com/docs/whatsapp/business-management-api/message-templates/limited-time-offer-templates
    https://developers.facebook.com/docs/whatsapp/business-management-api/authentication-templates"""
    properties = defs["TemplateComponent"]["properties"]
    types = properties["type"]["enum"] + ["carousel", "limited_time_offer"]
    properties["type"]["enum"] = types + [t.upper() for t in types]
    sub_type = properties["sub_type"]
    lower = [v for v in sub_type["enum"] if v == v.lower()]
    lower += [v for v in ("copy_code", "mpm", "spm", "voice_call", "order_details") if v not in lower]
    sub_type["enum"] = lower + [v.upper() for v in lower]
    properties["cards"] = {"type": "array", "minItems": 1, "maxItems": 10, "items": {"type": "object"},
                           "description": "Carousel cards (added by extract.py)."}


def patch_nullable_optionals(defs: dict) -> None:
    """JSON `null` for optional fields (location `name`/`address`, contact `name.*`, `birthday`, `org`, phone, email,
    url and address fields, flow `flow_token`): what pywa sends for a field it leaves empty."""
    location = defs["LocationMessage"]["allOf"][1]["properties"]["location"]["properties"]
    for key in ("name", "address"):
        location[key] = _nullable(location[key])
    for name in ("NameObject", "OrganizationObject", "PhoneObject", "EmailObject", "UrlObject", "AddressObject"):
        schema = defs[name]
        for key, value in schema["properties"].items():
            if key not in schema.get("required", ()) and key != "formatted_name":
                schema["properties"][key] = _nullable(value)
    contact = defs["ContactObject"]["properties"]
    for key in ("birthday", "org"):
        contact[key] = _nullable(contact[key])
    flow = next(b for b in defs["ActionObject"]["oneOf"] if b["properties"].get("name", {}).get("enum") == ["flow"])
    parameters = flow["properties"]["parameters"]["properties"]
    parameters["flow_token"] = _nullable(parameters["flow_token"])


def patch_contact_rules(defs: dict) -> None:
    """A contact needs `name.formatted_name` ("Required", MESSAGES_REFERENCE, contacts object); a phone's `type` is
    free text whose "standard values are CELL, MAIN, IPHONE, HOME, and WORK", not a closed list."""
    defs["ContactObject"]["required"] = ["name"]
    defs["NameObject"]["required"] = ["formatted_name"]
    phone_type = defs["PhoneObject"]["properties"]["type"]
    for schema in phone_type.get("anyOf", [phone_type]):
        schema.pop("enum", None)


def patch_recipient_identity_key_hash(defs: dict) -> None:
    """`recipient_identity_key_hash`: the identity-change check; the message is only delivered if the hash matches
    the customer's current one.
    https://developers.facebook.com/docs/whatsapp/cloud-api/reference/phone-numbers#identity-change-check"""
    defs["BaseMessageProperties"]["properties"]["recipient_identity_key_hash"] = {
        "type": "string", "description": "Identity-change check (added by extract.py)."}


def patch_required_fields(defs: dict) -> None:
    """Rules of MESSAGES_REFERENCE the schema leaves optional: a location's `latitude` and `longitude`, a reaction's
    `message_id` and `emoji` (an empty `emoji` removes a reaction), an interactive message's `body` (optional only
    for `product`)."""
    location = defs["LocationMessage"]["allOf"][1]["properties"]["location"]
    location["required"] = ["latitude", "longitude"]
    defs["ReactionMessage"]["allOf"][1]["properties"]["reaction"]["required"] = ["message_id", "emoji"]
    defs["InteractiveObject"]["if"] = {"properties": {"type": {"const": "product"}}}
    defs["InteractiveObject"]["else"] = {"required": ["body"]}


def patch_media(defs: dict) -> None:
    """A media object is `id` (digits) or `link` (http/https), with a `caption` of at most 1,024 characters
    (MESSAGES_REFERENCE, media object). The bounds are keywords on the properties themselves, so a refusal names the
    field (`image['link']`); `x-details` carries the words Meta uses for it."""
    media = defs["MediaObject"]
    media["properties"] = {
        "id": {"type": "string", "pattern": MEDIA_ID_PATTERN, "x-details": INVALID_MEDIA_ID},
        "link": {"type": "string", "pattern": MEDIA_LINK_PATTERN, "x-details": INVALID_URI},
        "caption": {"type": "string", "maxLength": 1024},
        "filename": {"type": "string"},
    }
    media["oneOf"] = [{"required": ["id"]}, {"required": ["link"]}]
    for branch in defs["StickerMessage"]["allOf"][1]["properties"]["sticker"]["oneOf"]:
        key = "id" if "id" in branch["properties"] else "link"
        branch["properties"][key].update(media["properties"][key])


def patch_interactive_kinds(defs: dict) -> None:
    """Interactive types Meta documents and the spec lacks, each with its action:
    `cta_url` (name `cta_url`, parameters `display_text` ≤ 20 characters and `url`),
    https://developers.facebook.com/docs/whatsapp/cloud-api/messages/interactive-cta-url-messages
    `location_request_message` (name `send_location`),
    https://developers.facebook.com/docs/whatsapp/cloud-api/messages/location-request-messages
    `voice_call` (name `voice_call`, parameters `display_text`, `ttl_minutes`),
    https://developers.facebook.com/docs/whatsapp/cloud-api/calling/user-initiated-calls
    `request_contact_info` (name `request_contact_info`), for users known by their business-scoped user id,
    `carousel` (action `cards`, 2 to 10).
    https://developers.facebook.com/docs/whatsapp/cloud-api/messages/interactive-media-carousel-messages"""
    interactive = defs["InteractiveObject"]["properties"]["type"]
    for kind in ("cta_url", "location_request_message", "voice_call", "request_contact_info", "carousel"):
        if kind not in interactive["enum"]:
            interactive["enum"].append(kind)
    actions = defs["ActionObject"]["oneOf"]
    actions.append({"required": ["name", "parameters"], "properties": {
        "name": {"type": "string", "enum": ["cta_url"]},
        "parameters": {"type": "object", "required": ["display_text", "url"], "properties": {
            "display_text": {"type": "string", "maxLength": 20}, "url": {"type": "string"}}}}})
    actions.append({"required": ["name"], "properties": {"name": {"type": "string", "enum": ["send_location"]}}})
    actions.append({"required": ["name"], "properties": {
        "name": {"type": "string", "enum": ["voice_call"]},
        "parameters": {"type": "object", "properties": {
            "display_text": {"type": "string", "maxLength": 20}, "ttl_minutes": {"type": "integer", "minimum": 1}}}}})
    actions.append({"required": ["name"], "properties": {"name": {"type": "string",
                                                                   "enum": ["request_contact_info"]}}})
    actions.append({"required": ["cards"], "properties": {
        "cards": {"type": "array", "minItems": 2, "maxItems": 10, "items": {"type": "object"}}}})


# Base properties first: patch_closed_extensions copies their names into every closed message branch.
PATCHES = [patch_base_properties, patch_recipient_identity_key_hash, patch_closed_extensions, patch_text_body,
           patch_location_coordinates, patch_language_policy, patch_template_component, patch_button_sub_type,
           patch_header_placeholder, patch_interactive_types, patch_mark_read, patch_template_component_types,
           patch_nullable_optionals, patch_contact_rules, patch_required_fields, patch_media, patch_interactive_kinds]


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
