"""The words the database stores for states and transitions, in one place.

Each enum mirrors a CHECK constraint of the schema (wa_outbox/sql/schema.sql); `tests/db/test_states.py` reads the
constraints from a migrated database and fails when the two differ, so SQL and Python cannot drift apart.
"""

from __future__ import annotations

import enum


class MessageStatus(enum.StrEnum):
    """`notifications.status`: where a message is in its life."""
    QUEUED = "queued"          # waiting for a worker (or for its next attempt)
    SENDING = "sending"        # claimed by a worker, lease set
    UNKNOWN = "unknown"        # the request may have reached Meta: settled from status webhooks
    SENT = "sent"              # Meta accepted it (wamid stored)
    DELIVERED = "delivered"
    READ = "read"
    FAILED = "failed"          # Meta reported failure after accepting it
    DEAD = "dead"              # the dead-letter queue
    CANCELLED = "cancelled"


# Final states no worker acts on again, which retention may delete (`wa-outbox prune`). A status webhook may still
# move a `failed` or `cancelled` message (Meta's late word wins), which updates its updated_at and so restarts its
# retention clock; one arriving after the prune finds no message and is recorded as unmatched. `dead` is final too,
# but the dead-letter queue is the operator's: prune deletes it only when asked (--dead-days).
PRUNABLE_STATUSES = (MessageStatus.SENT, MessageStatus.DELIVERED, MessageStatus.READ, MessageStatus.FAILED,
                     MessageStatus.CANCELLED)


class TimelineEvent(enum.StrEnum):
    """`notification_events.event`: one row per transition of a message."""
    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    RETRY_SCHEDULED = "retry_scheduled"
    THROTTLED = "throttled"              # the sender was over its rate: waits without spending an attempt
    SENDER_PAUSED = "sender_paused"      # the sender needs a human (auth, blocked)
    PAIR_LIMITED = "pair_limited"        # 131056: this recipient is paused
    UNKNOWN = "unknown"
    RECONCILED = "reconciled"            # a status webhook settled an unknown (or re-queued) send
    RELEASED = "released"                # claimed, given back unsent (a lost claim reply, a pause, shutdown)
    DELIVERED = "delivered"
    READ = "read"
    PLAYED = "played"
    FAILED = "failed"
    UNRECOGNIZED_STATUS = "unrecognized_status"  # a status word Meta sent that this version does not know
    DEAD = "dead"
    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    LIMIT_HELD = "limit_held"            # the portfolio's messaging limit is used up: waits for a unit to free
    TEMPLATE_HELD = "template_held"      # its template is paused or not approved: waits, no attempt spent
    TEMPLATE_RELEASED = "template_released"  # its template was approved again: queued in its order


# == What counts as sent (issue 23: the first hour) ==
# Every count of messages sent (wa_outbox_sends_total{outcome="sent"}, the ops page's charts, `wa-outbox status`)
# counts these timeline events: Meta accepted the message, as its send's answer said (`sent`), or as a status webhook
# showed later for a send whose answer was lost or that was re-queued or dead meanwhile (`reconciled`). A message
# has at most one of them: a status webhook reconciles only a message that is not sent yet.
SENT_EVENTS = (TimelineEvent.SENT, TimelineEvent.RECONCILED)

# A message in one of these statuses went through after whatever error it had before: its `last_error` is history
# (an earlier attempt's), shown after its outcome, never as why it is where it is.
ERROR_IS_HISTORY = (MessageStatus.SENT, MessageStatus.DELIVERED, MessageStatus.READ, MessageStatus.CANCELLED)


class HoldReason(enum.StrEnum):
    """`notifications.hold_reason`: what holds a queued message, beside its schedule (NULL: nothing)."""
    MESSAGING_LIMIT = "messaging_limit"              # the business portfolio's 24-hour limit is used up
    TEMPLATE_PAUSED = "template_paused"              # Meta paused its template (quality), 132015
    TEMPLATE_NOT_APPROVED = "template_not_approved"  # its template is pending, rejected or in appeal


# What each hold means, in the words the CLI's `status` and the ops message page show beside it.
HOLD_REASON_TEXT = {
    HoldReason.MESSAGING_LIMIT: "its business portfolio's 24-hour messaging limit is used up: it goes when the "
                                "oldest counted customer frees a unit (next attempt), or when the limit is raised",
    HoldReason.TEMPLATE_PAUSED: "Meta paused its template: it goes when the template is approved again",
    HoldReason.TEMPLATE_NOT_APPROVED: "its template is not approved (pending, rejected or in appeal): it goes when "
                                      "the template is approved",
}


def hold_reason_text(reason: str) -> str:
    """What a `hold_reason` means, in words (an unknown word, from a newer schema, as itself)."""
    try:
        return HOLD_REASON_TEXT[HoldReason(reason)]
    except ValueError:
        return reason


class WebhookEventStatus(enum.StrEnum):
    """`webhook_events.status`: the inbound queue."""
    QUEUED = "queued"
    PROCESSING = "processing"
    DONE = "done"
    DEAD = "dead"


class WebhookEventKind(enum.StrEnum):
    """`webhook_events.kind`."""
    MESSAGE = "message"
    STATUS = "status"
    CHANGE = "change"


class CampaignStatus(enum.StrEnum):
    """`campaigns.status`: whether an operator lets the campaign's messages go."""
    ACTIVE = "active"
    PAUSED = "paused"
    CANCELLED = "cancelled"


class EventType(enum.StrEnum):
    """`events.type`: what an event for apps reports (GET /v1/events, endpoints). docs/events.md shows each."""
    MESSAGE_RECEIVED = "message.received"        # a customer's message
    MESSAGE_STATUS = "message.status"            # an outbound message moved: sent, delivered, read, failed, dead, ...
    MESSAGE_ECHO = "message.echo"                # smb_message_echoes: sent from the WhatsApp Business app
    MEDIA_READY = "media.ready"                  # an inbound message's media is stored
    TEMPLATE_STATUS = "template.status"          # message_template_status_update
    TEMPLATE_QUALITY = "template.quality"        # message_template_quality_update
    TEMPLATE_CATEGORY = "template.category"      # template_category_update
    TEMPLATE_COMPONENTS = "template.components"  # message_template_components_update
    ACCOUNT_UPDATE = "account.update"            # account_update
    ACCOUNT_REVIEW = "account.review"            # account_review_update
    ACCOUNT_ALERT = "account.alert"              # account_alerts
    BUSINESS_CAPABILITY = "business.capability"  # business_capability_update (the messaging limit)
    PHONE_NUMBER_NAME = "phone_number.name"      # phone_number_name_update
    PHONE_NUMBER_QUALITY = "phone_number.quality"  # phone_number_quality_update
    CALL = "call"                                # calls
    USER_PREFERENCES = "user.preferences"        # user_preferences
    SECURITY = "security"                        # security
    FLOWS = "flows"                              # flows
    WEBHOOK_OTHER = "webhook.other"              # any other field Meta sends: stored and passed on as received


class EndpointState(enum.StrEnum):
    """`endpoints.state`."""
    ENABLED = "enabled"
    DISABLED = "disabled"


class DeliveryStatus(enum.StrEnum):
    """`deliveries.status`: one event on its way to one endpoint."""
    QUEUED = "queued"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    FAILED = "failed"              # the retry schedule ran out: replay it (`endpoints replay --failed-only`)


def sql_list(words: type[enum.StrEnum]) -> str:
    """The enum as an SQL list literal, e.g. for a CHECK constraint: ('queued', 'sending', …)."""
    return "(" + ", ".join(f"'{w.value}'" for w in words) + ")"
