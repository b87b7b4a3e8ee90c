"""POST /v1/media: an app hands over a file to send (multipart/form-data with a `file` part), answered 201
{"id", "mime_type", "size", "sha256", "filename"}; a message then names it as {"document": {"upload": <id>}}.

The body is parsed as it is read (werkzeug's sans-IO multipart decoder over request.stream, 64 KB at a time) and the
file's bytes go to the store chunk by chunk (outbound_media.save), never whole in this process's memory. The mime
type is the file part's Content-Type, or a `type` form field sent before the file part (Meta's own upload takes
`type`); the filename is the part's, or a `filename` field before it. One transaction: a refusal midway (too large,
a malformed body) keeps nothing.

Size: the file is kept up to the smaller of Meta's cap for its kind and the store's (outbound_media.max_bytes), and
the whole request is bounded by the web's body limit (WA_OUTBOX_WEBHOOK_MAX_BYTES, 6 MB by default), which the
gunicorn worker reads before the app sees a byte (web/gunicorn_worker.py): raise it to accept larger files through
the web, or hand them over from Python (wa_outbox.upload_media streams into the store up to its cap). 413 beyond.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

from flask import Blueprint, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from .. import db, logs
from ..outbound_media import InvalidUpload, UploadTooLarge, filename_of, mime_type_of, save
from . import api_views
from .app_state import engine_of
from .errors import json_error

blueprint = Blueprint("media_upload", __name__, url_prefix="/v1")
blueprint.before_request(api_views.require_token)
READ_BYTES = 64 * 1024
MAX_FIELD_BYTES = 4096  # a form field (type, filename) is a few words


class BadBody(Exception):
    """The request is not a multipart body wa-outbox can read; str(error) says why (400)."""


class _Form:
    """The request's multipart body, read as it arrives: the fields before the file part, then the file's bytes."""

    def __init__(self, stream: IO[bytes], boundary: str) -> None:
        if not boundary.isascii() or len(boundary) > 70:  # RFC 2046 section 5.1.1
            raise BadBody("the multipart boundary must be 1 to 70 ASCII characters")
        self.stream = stream
        # No max_form_memory_size: werkzeug applies it to its whole buffer (a read's worth); fields are bounded
        # in until_file() instead. The buffer holds at most one read: events are taken after each.
        self.decoder = MultipartDecoder(boundary.encode("latin-1"), max_parts=16)
        self.fields: dict[str, str] = {}

    def _events(self) -> Iterator[object]:
        ended = False
        while True:
            try:
                event = self.decoder.next_event()
            except RequestEntityTooLarge:  # the decoder's word for too many parts (the body's size is the stream's)
                raise BadBody("too many parts: send the file, and at most a `type` and a `filename` field") from None
            if isinstance(event, NeedData):
                if ended:
                    raise BadBody("the body ended before the multipart's closing boundary")
                chunk = self.stream.read(READ_BYTES)
                ended = not chunk
                self.decoder.receive_data(chunk or None)
                continue
            yield event
            if isinstance(event, Epilogue):
                return

    def until_file(self) -> File:
        """Read up to the `file` part; its event (name, filename, headers). Fields before it are kept."""
        self.events = self._events()
        field: str | None = None
        value = bytearray()
        try:
            for event in self.events:
                if isinstance(event, Field):
                    field, value = event.name, bytearray()
                elif isinstance(event, Data) and field is not None:
                    value += event.data
                    if len(value) > MAX_FIELD_BYTES:
                        raise BadBody(f"form field {field!r} is longer than {MAX_FIELD_BYTES} bytes")
                    if not event.more_data:
                        self.fields[field] = value.decode("utf-8", "replace")
                        field = None
                elif isinstance(event, File):
                    if event.name == "file":
                        return event
                    raise BadBody(f"unexpected file part {event.name!r}: send the file as the part named 'file'")
                elif isinstance(event, Epilogue):
                    break
        except ValueError as exc:  # the decoder's word for a malformed body
            raise BadBody(f"the multipart body is malformed: {exc}") from None
        raise BadBody("no file part: send the file as multipart/form-data with a part named 'file'")

    def file_data(self) -> Iterator[bytes]:
        """The file part's bytes as they arrive; then the rest of the body is read (and ignored)."""
        try:
            for event in self.events:
                if isinstance(event, Data):
                    if event.data:
                        yield event.data
                    if not event.more_data:
                        break
                else:
                    raise BadBody("the file part ended unexpectedly")
            for _ in self.events:  # fields after the file are not read for its type (see the module docstring)
                pass
        except ValueError as exc:
            raise BadBody(f"the multipart body is malformed: {exc}") from None


@blueprint.post("/media")
def upload_media():
    if request.mimetype != "multipart/form-data" or not request.mimetype_params.get("boundary"):
        return json_error(415, "send the file as multipart/form-data with a part named 'file'")
    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    if limit is not None and request.content_length is not None and request.content_length > limit:
        return json_error(413, f"body is larger than the limit of {limit} bytes")
    try:
        form = _Form(request.stream, request.mimetype_params["boundary"])
        part = form.until_file()
        given_type = form.fields.get("type") or part.headers.get("Content-Type")
        if not given_type or given_type.split(";")[0].strip().lower() == "application/octet-stream":
            if "type" not in form.fields:
                raise InvalidUpload("give the file's mime type: the file part's Content-Type, or a 'type' field "
                                    "before the file part")
        mime = mime_type_of(given_type)
        name = filename_of(form.fields.get("filename") or part.filename)
        conn = engine_of(current_app).raw_connection()
        try:
            uploaded = save(db.psycopg_connection(conn), form.file_data(), mime, name)
        finally:
            conn.close()
    except UploadTooLarge as exc:
        return json_error(413, str(exc))
    except RequestEntityTooLarge:
        return json_error(413, f"body is larger than the limit of {limit} bytes")
    except (InvalidUpload, BadBody) as exc:
        return json_error(400, str(exc))
    logs.events.debug("file %s handed over (%s, %s bytes)", uploaded.id, uploaded.mime_type, uploaded.size,
                      extra={"media_id": uploaded.id})
    response = jsonify(uploaded.as_json())
    response.headers["Location"] = f"/v1/media/{uploaded.id}"
    return response, 201
