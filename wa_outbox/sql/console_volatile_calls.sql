-- `wa-outbox db query` (read-only): the VOLATILE functions a statement may call, by the names it uses. Each name is
-- (schema, name); schema '' is unqualified, looked up on the search path (pg_catalog included) as Postgres does.
-- Every overload of the name counts, so whichever one Postgres would pick is covered. Operators: the functions
-- behind them (pg_operator.oprcode). Returns (kind, schema, name) of each volatile one (wa_outbox/cli/_readonly.py).
-- Safe to repeat: reads the catalog only.
WITH functions (schema, name) AS (
    SELECT * FROM unnest(%(function_schemas)s::text[], %(function_names)s::text[])
), operators (schema, name) AS (
    SELECT * FROM unnest(%(operator_schemas)s::text[], %(operator_names)s::text[])
)
SELECT DISTINCT 'function' AS kind, n.nspname AS schema, p.proname AS name
FROM functions f
JOIN pg_proc p ON p.proname = f.name
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.provolatile = 'v'
  AND (n.nspname = f.schema OR (f.schema = '' AND n.nspname = ANY (current_schemas(true))))
UNION
SELECT DISTINCT 'operator', n.nspname, o.oprname
FROM operators f
JOIN pg_operator o ON o.oprname = f.name
JOIN pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_proc p ON p.oid = o.oprcode
WHERE p.provolatile = 'v'
  AND (n.nspname = f.schema OR (f.schema = '' AND n.nspname = ANY (current_schemas(true))))
