"""Graph API errors as Meta writes them: the error JSON of a refused send, and the `errors[]` of a failed status.

Titles and details follow Meta's error-code reference, so a sender under test sees the same text it will see in
production (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes). A sender must decide on
`error.code`, never on the HTTP status; the simulator answers 401 for the authentication codes and 400 for every other
code unless a fault rule sets `http_status` (Meta's own table gives 5xx or 403 for a few codes, and some reports show
429 for throttling: a rule can reproduce each)."""

from __future__ import annotations

import secrets
from typing import Any

ERROR_CODES_URL = "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"

# code -> (title, details)
CATALOGUE: dict[int, tuple[str, str]] = {
    0: ("AuthException", "We were unable to authenticate the app user."),
    1: ("API Unknown", "Invalid request or possible server error."),
    2: ("API Service", "Temporary due to downtime or due to being overloaded."),
    3: ("API Method", "Capability or permissions issue."),
    4: ("API Too Many Calls", "The app has reached its API call rate limit."),
    10: ("Permission Denied", "Permission is either not granted or has been removed."),
    100: ("Invalid parameter", "The request included one or more unsupported or misspelled parameters."),
    190: ("Access token has expired", "Error validating access token: Session has expired."),
    368: ("Temporarily blocked for policies violations",
          "The WhatsApp Business Account associated with the app has been restricted or disabled for violating a "
          "platform policy."),
    80007: ("Rate limit issues", "The WhatsApp Business Account has reached its rate limit."),
    130429: ("Rate limit hit", "Cloud API message throughput has been reached."),
    131000: ("Something went wrong", "Message failed to send due to an unknown error."),
    131005: ("Access denied", "Permission is either not granted or has been removed."),
    131008: ("Required parameter is missing", "The request is missing a required parameter."),
    131009: ("Parameter value is not valid", "One or more parameter values are invalid."),
    131016: ("Service unavailable", "A service is temporarily unavailable."),
    131021: ("Recipient cannot be sender", "Sender and recipient phone number is the same."),
    131026: ("Message Undeliverable",
             "Unable to deliver message. The recipient may not be a WhatsApp user, may not have accepted the latest "
             "terms of service, or may be using an old WhatsApp version."),
    131031: ("Account has been locked",
             "The WhatsApp Business Account associated with the app has been restricted or disabled for violating a "
             "platform policy, or we were unable to verify data included in the request."),
    131042: ("Business eligibility payment issue", "There was an error related to your payment method."),
    131047: ("Re-engagement message",
             "More than 24 hours have passed since the recipient last replied to the sender number."),
    131048: ("Spam rate limit hit",
             "Message failed to send because there are restrictions on how many messages can be sent from this phone "
             "number. This may be because too many previous messages were blocked or flagged as spam."),
    131049: ("This message was not delivered to maintain healthy ecosystem engagement.",
             "In order to maintain a healthy ecosystem engagement, the message failed to be delivered."),
    131050: ("Unable to deliver the message. This recipient has chosen to stop receiving marketing messages on "
             "WhatsApp from your business.",
             "The recipient has stopped marketing messages from your business."),
    131051: ("Unsupported message type", "Unsupported message type."),
    131053: ("Media upload error", "Unable to upload the media used in the message."),
    131056: ("(Business Account, Consumer Account) pair rate limit hit",
             "Too many messages sent from the sender phone number to the same recipient phone number in a short "
             "period of time."),
    131057: ("Account in maintenance mode", "Business Account is in maintenance mode."),
    132000: ("Template Param Count Mismatch",
             "The number of variable parameter values included in the request did not match the number of variable "
             "parameters defined in the template."),
    132001: ("Template does not exist",
             "The template does not exist in the specified language or the template has not been approved."),
    132005: ("Template Hydrated Text Too Long", "Translated text is too long."),
    132007: ("Template Format Character Policy Violated", "Template content violates a WhatsApp policy."),
    132012: ("Template Parameter Format Mismatch", "Variable parameter values formatted incorrectly."),
    132015: ("Template is Paused", "Template is paused due to low quality so it cannot be sent in a template message."),
    132016: ("Template is Disabled",
             "Template has been paused too many times due to low quality and is now permanently disabled."),
    133004: ("Server Temporarily Unavailable", "Server is temporarily unavailable."),
    133010: ("Phone number Not Registered", "Phone number not registered on the WhatsApp Business Platform."),
}

AUTH_CODES = frozenset({0, 190})


def describe(code: int) -> tuple[str, str]:
    """(title, details) for `code`; ranges Meta documents as a family get the family's wording."""
    if code in CATALOGUE:
        return CATALOGUE[code]
    if 200 <= code <= 299:
        return "API Permission", "Permission is either not granted or has been removed."
    if 132000 <= code <= 132099:
        return "Template error", "The template could not be used in this message."
    return "Unknown error", "An unknown error occurred."


def default_http_status(code: int) -> int:
    return 401 if code in AUTH_CODES else 400


def fbtrace_id() -> str:
    return "A" + secrets.token_urlsafe(16)[:22]


def graph_error(code: int, *, subcode: int | None = None, details: str | None = None,
                message: str | None = None) -> dict[str, Any]:
    """The JSON body of a refused Graph API call: `{"error": {message, type, code, error_data, …, fbtrace_id}}`."""
    title, default_details = describe(code)
    error: dict[str, Any] = {
        "message": message or f"(#{code}) {title}",
        "type": "OAuthException",
        "code": code,
        "error_data": {"messaging_product": "whatsapp", "details": details or default_details},
    }
    if subcode is not None:
        error["error_subcode"] = subcode
    error["fbtrace_id"] = fbtrace_id()
    return {"error": error}


def status_error(code: int) -> dict[str, Any]:
    """One entry of a `failed` status webhook's `errors[]`."""
    title, details = describe(code)
    return {"code": code, "title": title, "message": title, "error_data": {"details": details},
            "href": ERROR_CODES_URL}
