-- The table package pgkeys reads API keys from (docs/keys.md).
--
-- Apply it with pgkeys.Migrate, or with
--   psql "$DATABASE_URL" --single-transaction -v ON_ERROR_STOP=1 -f identity/pgkeys/schema.sql
-- Applying it again changes nothing: it creates what is missing and never
-- drops or alters. It runs as one transaction (Migrate sends it as one
-- simple query; psql needs --single-transaction), and the advisory lock
-- makes processes that apply it at the same time wait for each other.
SELECT pg_advisory_xact_lock(4242000001);

CREATE TABLE IF NOT EXISTS costguard_api_keys (
    -- The lowercase hex SHA-256 of the API key; the key itself is never
    -- stored. In SQL: encode(sha256(convert_to('the key', 'UTF8')), 'hex').
    key_sha256 text PRIMARY KEY CHECK (key_sha256 ~ '^[0-9a-f]{64}$'),
    -- Whose budget the key spends; '' keys the budget by the key's hash.
    principal  text NOT NULL DEFAULT '',
    -- One of the limiter's plans; a plan it does not have is answered 503.
    plan       text NOT NULL CHECK (plan <> ''),
    -- A disabled key is unknown (401).
    disabled   boolean NOT NULL DEFAULT false,
    -- From this instant on, the key is unknown (401); NULL: never.
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
