"""wa-outbox: reliable WhatsApp Cloud API messaging with Postgres as the only moving part."""

__version__ = "0.1.0"
