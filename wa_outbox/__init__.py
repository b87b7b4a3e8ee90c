"""wa-outbox: reliable WhatsApp Cloud API messaging with Postgres as the only moving part.

    from wa_outbox import enqueue
    with engine.begin() as conn:                      # the app's own transaction
        conn.execute(orders.insert(), {...})
        enqueue(conn, to="+5511987654321", message={"type": "text", "text": {"body": "Order received"}},
                idempotency_key=f"order-{order_id}-received")
"""

from .enqueue import Connectable, DBAPIConnection, enqueue, enqueue_many
from .messages import InvalidMessage
from .outbound_media import InvalidUpload, upload_media

__version__ = "0.1.0"
__all__ = ["enqueue", "enqueue_many", "InvalidMessage", "Connectable", "DBAPIConnection",
           "upload_media", "InvalidUpload"]
