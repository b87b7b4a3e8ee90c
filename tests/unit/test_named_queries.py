"""The hot paths run each query file with PostgreSQL's `$n` placeholders, converted once (db.named_query): the text
must be exactly what psycopg itself would send for the file's `%(name)s` placeholders, for every file."""

from __future__ import annotations

from importlib import resources

import psycopg
import pytest
from psycopg._queries import PostgresQuery  # psycopg's own conversion: the reference
from psycopg.adapt import Transformer

from wa_outbox import db

NAMES = sorted(p.name[:-4] for p in resources.files("wa_outbox").joinpath("sql").iterdir()
               if p.name.endswith(".sql") and p.name != "schema.sql")


@pytest.mark.parametrize("name", NAMES)
def test_the_converted_text_is_psycopgs(name: str) -> None:
    converted = db.named_query(name)
    params = {n: None for n in converted.names}
    reference = PostgresQuery(Transformer())
    reference.convert(db.query(name), params if params else None)
    assert converted.text == reference.query
    assert b"%(" not in converted.text


def test_a_name_used_twice_is_one_parameter() -> None:
    assert any(db.query(n).count("%(limit)s") > 1 for n in NAMES)  # the case exists in the files
    claim = db.named_query("claim_notifications")
    assert claim.names.count("limit") == 1
    assert claim.args({n: i for i, n in enumerate(claim.names)}) == list(range(len(claim.names)))


def test_a_missing_parameter_is_named() -> None:
    claim = db.named_query("claim_notifications")
    with pytest.raises(psycopg.ProgrammingError, match="query parameter missing: worker_id"):
        claim.args({n: 1 for n in claim.names if n != "worker_id"})
    with pytest.raises(psycopg.ProgrammingError, match="missing"):
        claim.args(None)


def test_each_file_is_read_and_converted_once() -> None:
    assert db.named_query("claim_notifications") is db.named_query("claim_notifications")
    assert db.query("claim_notifications") is db.query("claim_notifications")
