"""wa_outbox/sql/schema.sql is the current schema: a database built from it alone and one migrated from empty by
alembic have the same catalog (tables, columns, constraints, indexes, functions, triggers, views, sequences, comments,
grants, and anything created outside schema wa_outbox). The file is what a reader opens; the migrations are how a
database gets there. A migration that changes the schema without schema.sql, or the reverse, fails here with a diff.

Compared through catalog queries, not pg_dump: the embedded server (pgserver) ships no pg_dump.
"""

from __future__ import annotations

import difflib
import re
from importlib import resources

import psycopg
import pytest

from tests.conftest import _with_dbname, create_scratch_database, drop_database
from wa_outbox import migrate

SCHEMA_SQL = resources.files("wa_outbox").joinpath("sql", "schema.sql")

# Objects of this schema and of every other one a migration could create in (not Postgres's own).
_OURS = "n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND n.nspname NOT LIKE 'pg_temp%' " \
        "AND n.nspname NOT LIKE 'pg_toast_temp%'"
# alembic's bookkeeping: in the migrated database only.
_NOT_ALEMBIC = "c.relname NOT IN ('alembic_version', 'alembic_version_pkc')"

CATALOG = {
    "schemas": f"""
        SELECT n.nspname, jsonb_build_object('owner', pg_get_userbyid(n.nspowner), 'acl', n.nspacl::text[])
        FROM pg_namespace n WHERE {_OURS} AND n.nspname <> 'public'""",
    "extensions": """
        SELECT e.extname, jsonb_build_object('schema', e.extnamespace::regnamespace::text)
        FROM pg_extension e WHERE e.extname <> 'plpgsql'""",
    "relations": f"""
        SELECT n.nspname || '.' || c.relname,
               jsonb_build_object('kind', c.relkind, 'persistence', c.relpersistence,
                                  'options', (SELECT array_agg(o ORDER BY o) FROM unnest(c.reloptions) o),
                                  'row_security', c.relrowsecurity, 'owner', pg_get_userbyid(c.relowner),
                                  'acl', c.relacl::text[])
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS} AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c') AND {_NOT_ALEMBIC}""",
    # In order: `SELECT *` and INSERT without a column list see the columns in this order.
    "columns": f"""
        SELECT n.nspname || '.' || c.relname || ' #' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
                   || ' ' || a.attname,
               jsonb_build_object('type', format_type(a.atttypid, a.atttypmod), 'not_null', a.attnotnull,
                                  'default', pg_get_expr(d.adbin, d.adrelid), 'identity', a.attidentity,
                                  'generated', a.attgenerated,
                                  'collation', CASE WHEN a.attcollation <> t.typcollation
                                                    THEN a.attcollation::regcollation::text END,
                                  -- (n_distinct and the like; not what the server stamps itself, pg_*)
                                  'options', (SELECT array_agg(o ORDER BY o) FROM unnest(a.attoptions) o
                                              WHERE o NOT LIKE 'pg\\_%'),
                                  'storage', a.attstorage, 'acl', a.attacl::text[])
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE {_OURS} AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c') AND a.attnum > 0 AND NOT a.attisdropped
          AND {_NOT_ALEMBIC}""",
    "constraints": f"""
        SELECT coalesce(c.relname, format_type(con.contypid, NULL)) || '.' || con.conname,
               jsonb_build_object('type', con.contype, 'definition', pg_get_constraintdef(con.oid),
                                  'deferrable', con.condeferrable, 'deferred', con.condeferred)
        FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace
        LEFT JOIN pg_class c ON c.oid = con.conrelid
        WHERE {_OURS} AND (c.relname IS NULL OR {_NOT_ALEMBIC})""",
    "indexes": f"""
        SELECT n.nspname || '.' || c.relname, to_jsonb(pg_get_indexdef(c.oid))
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS} AND {_NOT_ALEMBIC}""",
    "functions": f"""
        SELECT n.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
               jsonb_build_object('definition', CASE WHEN p.prokind = 'a' THEN NULL ELSE pg_get_functiondef(p.oid) END,
                                  'owner', pg_get_userbyid(p.proowner), 'acl', p.proacl::text[])
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE {_OURS} AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')""",
    "triggers": f"""
        SELECT c.relname || '.' || t.tgname,
               jsonb_build_object('definition', pg_get_triggerdef(t.oid), 'enabled', t.tgenabled)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS} AND NOT t.tgisinternal""",
    "views": f"""
        SELECT n.nspname || '.' || c.relname, to_jsonb(pg_get_viewdef(c.oid, true))
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS} AND c.relkind IN ('v', 'm')""",
    "rules_and_policies": f"""
        SELECT 'rule ' || c.relname || '.' || r.rulename, to_jsonb(pg_get_ruledef(r.oid))
        FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS} AND r.rulename <> '_RETURN'
        UNION ALL
        SELECT 'policy ' || c.relname || '.' || p.polname,
               jsonb_build_object('command', p.polcmd, 'using', pg_get_expr(p.polqual, p.polrelid),
                                  'check', pg_get_expr(p.polwithcheck, p.polrelid))
        FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS}""",
    "sequences": f"""
        SELECT n.nspname || '.' || c.relname,
               jsonb_build_object('type', format_type(s.seqtypid, NULL), 'start', s.seqstart,
                                  'increment', s.seqincrement, 'min', s.seqmin, 'max', s.seqmax,
                                  'cache', s.seqcache, 'cycle', s.seqcycle,
                                  'owned_by', (SELECT d.refobjid::regclass::text || '.' || a.attname
                                               FROM pg_depend d JOIN pg_attribute a
                                                 ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                                               WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass
                                                 AND d.deptype IN ('a', 'i')))
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE {_OURS}""",
    "types": f"""
        SELECT n.nspname || '.' || t.typname,
               jsonb_build_object('type', t.typtype, 'base', format_type(t.typbasetype, t.typtypmod),
                                  'not_null', t.typnotnull, 'default', t.typdefault,
                                  'labels', (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder)
                                             FROM pg_enum e WHERE e.enumtypid = t.oid))
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE {_OURS} AND t.typtype IN ('d', 'e', 'r', 'm')""",
    # COMMENT ON anything created in the database (a user object's oid is at least 16384, FirstNormalObjectId).
    "comments": """
        SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), to_jsonb(d.description)
        FROM pg_description d WHERE d.objoid >= 16384""",
    # Grants on the database itself and default privileges a migration may have set.
    "default_privileges": """
        SELECT coalesce(a.defaclnamespace::regnamespace::text, '') || ' ' || a.defaclobjtype::text
                   || ' ' || pg_get_userbyid(a.defaclrole), to_jsonb(a.defaclacl::text[])
        FROM pg_default_acl a""",
    "event_triggers": """
        SELECT e.evtname, jsonb_build_object('event', e.evtevent, 'function', e.evtfoid::regproc::text,
                                             'tags', e.evttags)
        FROM pg_event_trigger e""",
}


def catalog(conn: psycopg.Connection) -> dict[str, dict[str, str]]:
    """Every category of CATALOG: object name -> its description, as text (one line per key of a JSON object)."""
    snapshot: dict[str, dict[str, str]] = {}
    for category, sql in CATALOG.items():
        rows = conn.execute(sql).fetchall()
        snapshot[category] = {name: _text(value) for name, value in rows}
    return snapshot


def _text(value) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_text(value[key])}" for key in sorted(value))
    if isinstance(value, str):
        # pg_get_functiondef keeps the body as written: trailing blanks are not a difference worth a failure.
        return "\n".join(line.rstrip() for line in value.strip().splitlines())
    return repr(value)


def differences(migrated: dict, from_file: dict) -> list[str]:
    """Readable differences, category by category: what only one side has, and a diff of what both have."""
    lines: list[str] = []
    for category in CATALOG:
        left, right = migrated[category], from_file[category]
        for name in sorted(left.keys() - right.keys()):
            lines.append(f"[{category}] {name}: in the migrated database only\n    "
                         + left[name].replace("\n", "\n    "))
        for name in sorted(right.keys() - left.keys()):
            lines.append(f"[{category}] {name}: in schema.sql only\n    " + right[name].replace("\n", "\n    "))
        for name in sorted(left.keys() & right.keys()):
            if left[name] != right[name]:
                diff = difflib.unified_diff(left[name].splitlines(), right[name].splitlines(),
                                            "migrated", "schema.sql", lineterm="", n=2)
                lines.append(f"[{category}] {name} differs:\n    " + "\n    ".join(diff))
    return lines


@pytest.fixture(scope="module")
def from_file_url(server_url):
    """A scratch database with nothing but schema.sql applied, as one transaction."""
    name = create_scratch_database(server_url, prefix="wa_outbox_schema_file")
    url = _with_dbname(server_url, name)
    with psycopg.connect(url) as conn:
        conn.execute(SCHEMA_SQL.read_text())
    yield url
    drop_database(server_url, name)


@pytest.fixture(scope="module")
def migrated_url(server_url):
    """A scratch database migrated from empty, its own: the session's database collects grants and roles from other
    tests (`db support-role`), which are no part of the schema."""
    name = create_scratch_database(server_url, prefix="wa_outbox_schema_migrated")
    url = _with_dbname(server_url, name)
    migrate.upgrade(url)
    yield url
    drop_database(server_url, name)


def test_schema_sql_is_the_migrated_schema(migrated_url, from_file_url):
    with psycopg.connect(migrated_url) as a, psycopg.connect(from_file_url) as b:
        found = differences(catalog(a), catalog(b))
    assert not found, ("wa_outbox/sql/schema.sql and the migrations disagree (update schema.sql with the migration):"
                       "\n" + "\n".join(found))


def test_the_comparison_sees_a_change(from_file_url):
    """A changed default, function body, index, comment or grant each shows as a difference (the test above could
    otherwise pass by comparing nothing)."""
    changes = [
        "ALTER TABLE wa_outbox.settings ALTER COLUMN updated_at SET DEFAULT clock_timestamp()",
        "CREATE OR REPLACE FUNCTION wa_outbox.status_rank(status text) RETURNS integer LANGUAGE sql IMMUTABLE "
        "PARALLEL SAFE AS $$ SELECT 0 $$",
        "CREATE INDEX settings_value ON wa_outbox.settings (value)",
        "COMMENT ON TABLE wa_outbox.settings IS 'changed'",
        "GRANT SELECT ON wa_outbox.settings TO PUBLIC",
        "ALTER TABLE wa_outbox.contacts SET (fillfactor = 70)",
        "ALTER TABLE wa_outbox.settings ADD COLUMN extra text",
        "ALTER TABLE wa_outbox.settings ALTER COLUMN value SET (n_distinct = 5)",
        "ALTER TABLE wa_outbox.notifications VALIDATE CONSTRAINT notifications_recipient_check",
    ]
    with psycopg.connect(from_file_url) as conn:
        before = catalog(conn)
        for change in changes:
            with conn.transaction(force_rollback=True):
                conn.execute(change)
                assert differences(before, catalog(conn)), change
        assert not differences(before, catalog(conn))


def test_schema_sql_names_the_head_revision():
    """The file says which migration it matches; a new migration must update it (and this line)."""
    found = re.search(r"^-- Revision: (\S+)$", SCHEMA_SQL.read_text(), re.M)
    assert found and found.group(1) == migrate.head(), "schema.sql's `-- Revision:` line must name the head"


def test_roles_a_migration_creates_are_in_schema_sql():
    """Roles belong to the server, not to a database, so the catalogs above cannot tell them apart: a migration that
    creates one must say so in schema.sql too (none does today)."""
    statement = re.compile(r"^\s*(CREATE\s+(?:ROLE|USER|GROUP)\s+[^;]+);", re.I | re.M)
    text = SCHEMA_SQL.read_text()
    in_file = {" ".join(s.split()) for s in statement.findall(text)}
    for path in sorted((migrate.MIGRATIONS_DIR / "sql").glob("*.up.sql")):
        for found in statement.findall(path.read_text()):
            assert " ".join(found.split()) in in_file, f"{path.name}: {found} is not in schema.sql"
