"""Alembic migrations; each revision's SQL is in sql/<rev>.{up,down}.sql. Installed as `wa_outbox._migrations`
(setup.py), never as a top-level `migrations` package."""
