-- PostgreSQL roles for a production paywatch. Run with psql as a superuser,
-- twice: once before the first `paywatch migrate` (roles, database, schema),
-- and once after it (the storefront's grants on the views, which only exist
-- once migrated). Running it again later is harmless.
--
--   psql -v ON_ERROR_STOP=1 -v paywatch_password="$PAYWATCH_DB_PASSWORD" \
--        -v storefront_password="$STOREFRONT_DB_PASSWORD" \
--        -d postgres -f deploy/postgres-roles.sql
--
-- paywatch   owns the database and everything the migrations create.
-- storefront reads the documented views (contract/storefront.json) and nothing else: no table,
--            no write, no function. The views run with their owner's rights,
--            so no grant on the tables behind them is needed (or given).

\set ON_ERROR_STOP on

-- Roles: created once; a rerun leaves existing roles and passwords alone.
SELECT format('CREATE ROLE paywatch LOGIN PASSWORD %L', :'paywatch_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paywatch') \gexec
SELECT format('CREATE ROLE storefront LOGIN PASSWORD %L', :'storefront_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'storefront') \gexec
ALTER ROLE paywatch NOSUPERUSER NOCREATEDB NOCREATEROLE;
ALTER ROLE storefront NOSUPERUSER NOCREATEDB NOCREATEROLE;

SELECT 'CREATE DATABASE paywatch OWNER paywatch ENCODING ''UTF8'''
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'paywatch') \gexec
ALTER DATABASE paywatch OWNER TO paywatch;
REVOKE ALL ON DATABASE paywatch FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE paywatch TO paywatch;
GRANT CONNECT ON DATABASE paywatch TO storefront;

\connect paywatch

-- paywatch owns the schema its migrations write to; nobody else creates in it.
ALTER SCHEMA public OWNER TO paywatch;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO storefront;

-- Read-only by default for the storefront's sessions, as a second fence.
ALTER ROLE storefront IN DATABASE paywatch SET default_transaction_read_only = on;

-- The storefront's read contract: SELECT on the views, once they exist.
SELECT format('GRANT SELECT ON public.%I TO storefront', v)
FROM unnest(ARRAY['paywatch_intents', 'paywatch_payment_status',
                  'paywatch_intent_transfers', 'paywatch_balances',
                  'paywatch_events', 'paywatch_contract',
                  'paywatch_ledger']) AS v
WHERE to_regclass('public.' || v) IS NOT NULL \gexec

-- Anything listed here is not granted yet: run `paywatch migrate`, then this file again.
SELECT v AS view_not_yet_migrated
FROM unnest(ARRAY['paywatch_intents', 'paywatch_payment_status',
                  'paywatch_intent_transfers', 'paywatch_balances',
                  'paywatch_events', 'paywatch_contract',
                  'paywatch_ledger']) AS v
WHERE to_regclass('public.' || v) IS NULL;
