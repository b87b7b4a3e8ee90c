-- `wa-outbox db support-role NAME`: whether NAME exists, whether it is anything but a plain role (a superuser, or
-- allowed to create roles or databases, replicate or bypass row security) or the role running this, and the views it
-- is to read: every view of the wa_outbox schema, none of its tables.
-- Safe to repeat: reads the catalog only.
SELECT r.oid IS NOT NULL AS exists,
       coalesce(r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls, false)
           AS privileged,
       %(name)s::text IN (current_user, session_user) AS is_me,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS i_am_superuser,
       pg_has_role(current_user, r.oid, 'MEMBER') AS i_am_member,
       (SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'wa_outbox' AND c.relkind IN ('v', 'm')) AS views
FROM (SELECT 1) AS one
LEFT JOIN pg_roles r ON r.rolname = %(name)s::text
