"""The read-only console's decisions, without a database: which statement forms `db query` runs (parsed by Postgres's
own parser), the names it hands to pg_proc, and which VOLATILE functions pass (wa_outbox/cli/_readonly.py)."""

from __future__ import annotations

import pytest

from wa_outbox.cli._readonly import READ_ONLY_VOLATILE, Inspected, Refused, SeveralStatements, inspect, volatile_refusal


@pytest.mark.parametrize("sql", [
    "SELECT 1", "select * from wa_outbox.queue_health", "TABLE wa_outbox.rate_limits", "VALUES (1), (2)",
    "SHOW ALL", "EXPLAIN SELECT 1", "EXPLAIN (ANALYZE off, VERBOSE) SELECT 1", "EXPLAIN (ANALYZE 0) VALUES (1)",
    "WITH a AS (SELECT 1) SELECT * FROM a", "SELECT 1 UNION SELECT 2", "SELECT 1;", "  -- a comment\nSELECT 1",
])
def test_reading_forms_are_allowed(sql):
    assert isinstance(inspect(sql), Inspected)


@pytest.mark.parametrize("sql, why", [
    ("UPDATE t SET a = 1", "UPDATE is not read-only"),
    ("INSERT INTO t VALUES (1)", "INSERT is not read-only"),
    ("COPY (SELECT 1) TO PROGRAM 'true'", "COPY is not read-only"),
    ("LOCK TABLE wa_outbox.notifications IN ACCESS EXCLUSIVE MODE", "LOCK is not read-only"),
    ("SET ROLE postgres", "SET is not read-only"),
    ("DO $$ BEGIN END $$", "DO is not read-only"),
    ("BEGIN", "a transaction command is not read-only"),
    ("EXPLAIN ANALYZE DELETE FROM t", "EXPLAIN ANALYZE runs the statement"),
    ("EXPLAIN (ANALYZE) SELECT 1", "EXPLAIN ANALYZE runs the statement"),
    ("EXPLAIN (ANALYZE on) SELECT 1", "EXPLAIN ANALYZE runs the statement"),
    ("EXPLAIN DELETE FROM t", "DELETE is not read-only"),
    ("SELECT 1 FROM t FOR UPDATE", "FOR UPDATE / FOR SHARE locks rows"),
    ("SELECT * FROM (SELECT 1 FROM t FOR KEY SHARE) s", "FOR UPDATE / FOR SHARE locks rows"),
    ("SELECT 1 INTO t", "SELECT INTO creates a table"),
    ("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "WITH … DELETE changes data"),
    ("WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x", "WITH … INSERT changes data"),
    ("selec 1", "not valid SQL"),
    ("", "no statement given"),
    ("-- only a comment", "no statement given"),
])
def test_everything_else_is_refused_saying_why_in_one_line(sql, why):
    with pytest.raises(Refused) as refused:
        inspect(sql)
    message = str(refused.value)
    assert message.startswith(why) and "\n" not in message


def test_several_statements_are_refused_as_such():
    with pytest.raises(SeveralStatements):
        inspect("SELECT 1; SELECT 2")


def test_every_function_and_operator_named_goes_to_the_catalog_check():
    found = inspect("SELECT lo_from_bytea(0, 'x'), pg_catalog.now(), a + 1, b OPERATOR(pg_catalog.||) 'x', "
                    "extract(epoch FROM now()) FROM generate_series(1, 2) g(a) WHERE a IN (SELECT nextval('s'))")
    assert {("", "lo_from_bytea"), ("pg_catalog", "now"), ("", "generate_series"), ("", "nextval"),
            ("pg_catalog", "extract")} <= found.functions
    assert {("", "+"), ("pg_catalog", "||")} <= found.operators
    # names as Postgres folds them: unquoted upper case, quoted, or Unicode-escaped, the same function
    spelled = inspect('SELECT SET_CONFIG(1), "lo_unlink"(1), U&"lo\\005ffrom_bytea"(0, \'x\')').functions
    assert spelled == {("", "set_config"), ("", "lo_unlink"), ("", "lo_from_bytea")}


def test_only_pg_catalogs_harmless_volatile_functions_pass():
    assert volatile_refusal([]) is None
    assert volatile_refusal([("function", "pg_catalog", "random"), ("function", "pg_catalog", "clock_timestamp")]) \
        is None
    assert "pg_catalog.lo_unlink() is VOLATILE" in volatile_refusal([("function", "pg_catalog", "lo_unlink")])
    assert "public.random()" in volatile_refusal([("function", "public", "random")])  # a look-alike elsewhere
    assert "operator public.###" in volatile_refusal([("operator", "public", "###")])
    for dangerous in ("lo_from_bytea", "lo_unlink", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf",
                      "set_config", "nextval", "setval", "pg_advisory_lock", "query_to_xml", "pg_read_file",
                      "pg_notify", "pg_sleep", "lo_import", "lo_export", "pg_switch_wal", "pg_stat_reset"):
        assert dangerous not in READ_ONLY_VOLATILE
