"""The CLI's tab-separated output: a value holding a tab, a newline or a backslash never splits a column or a line
(escaped \\t, \\n, \\r, \\\\ as PostgreSQL's COPY text format does), and reads back exactly."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st
from psycopg import sql

from wa_outbox.cli import _tsv

_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def read_tsv(line: str) -> list[str]:
    """What a reader of the format does: split on tabs, then undo the escapes."""
    return [re.sub(r"\\(.)", lambda m: _UNESCAPES[m.group(1)], cell) for cell in line.split("\t")]


@given(st.lists(st.text(), min_size=1, max_size=6))
def test_any_values_make_one_line_with_one_column_each_that_reads_back(values):
    line = _tsv(values)
    assert "\n" not in line and "\r" not in line
    assert read_tsv(line) == values


TEXT_POSTGRES_STORES = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                               max_size=40)


@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=TEXT_POSTGRES_STORES, second=TEXT_POSTGRES_STORES)
def test_db_query_prints_any_text_column_safely(run, first, second):
    query = sql.SQL("SELECT {} AS {}, {} AS b").format(sql.Literal(first), sql.Identifier("a\tb"), sql.Literal(second))
    result = run("db", "query", query.as_string(None))
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert lines[2:] == [""]  # a header and one row, whatever the values hold
    assert read_tsv(lines[0]) == ["a\tb", "b"]
    assert read_tsv(lines[1]) == [first, second]


@pytest.fixture
def dead_with_tabs(db, sender):
    from wa_outbox.enqueue import enqueue
    nid = enqueue(db, to="+5511987650001", message={"type": "text", "text": {"body": "oi"}})
    db.execute("UPDATE wa_outbox.notifications SET status = 'dead', "
               "last_error = jsonb_build_object('message', E'bad\\tparam\\nsecond line \\\\ end') WHERE id = %s",
               (nid,))
    return nid


def test_dlq_list_and_status_escape_the_reason(run, dead_with_tabs):
    listed = run("dlq", "list").stdout.splitlines()
    assert len(listed) == 2
    assert read_tsv(listed[1])[5] == "bad\tparam\nsecond line \\ end"
    found = run("status", "+5511987650001").stdout.splitlines()
    assert len(found) == 2
    assert read_tsv(found[1])[6] == "bad\tparam\nsecond line \\ end"


def test_db_query_prints_infinite_dates_as_postgres_words(run, db):
    # a message its template holds is due at 'infinity': `SELECT * FROM wa_outbox.notifications` must still print
    result = run("db", "query", "SELECT 'infinity'::timestamptz AS due, '-infinity'::date AS d, "
                                "'infinity'::timestamp AS ts, '2026-12-03 10:00+00'::timestamptz AS at")
    assert result.exit_code == 0, result.output
    *words, at = result.stdout.split("\n")[1].split("\t")
    assert words == ["infinity", "-infinity", "infinity"]  # and a finite one as before:
    assert datetime.fromisoformat(at) == datetime(2026, 12, 3, 10, tzinfo=UTC)
    as_json = run("db", "query", "--json", "SELECT 'infinity'::timestamptz AS due")
    assert as_json.exit_code == 0 and as_json.stdout.strip() == '{"due": "infinity"}'
