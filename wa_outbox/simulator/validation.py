"""The simulator's request checker, which lives in wa_outbox/meta_validation.py (shared with the enqueue path's
WA_OUTBOX_VALIDATE=meta check): these names stay importable from here."""

from ..meta_validation import (
    MAX_LIST_ROWS,
    MEDIA_DOWNLOAD_FAILED,
    SCHEMA_PATH,
    InvalidRequest,
    ParsedRequest,
    RequestChecker,
    unreachable_link,
)

__all__ = ["MAX_LIST_ROWS", "MEDIA_DOWNLOAD_FAILED", "SCHEMA_PATH", "InvalidRequest", "ParsedRequest",
           "RequestChecker", "unreachable_link"]
