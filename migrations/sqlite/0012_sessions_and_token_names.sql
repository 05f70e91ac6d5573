-- Identity (issue 18): the audit log names the configured token that acted,
-- beside the actor its caller declared, and the console's sign-ins are
-- sessions kept here rather than the token itself in a cookie.

ALTER TABLE audit_log ADD COLUMN token_name TEXT;

-- A console session. The cookie holds a random 256-bit id; only its
-- SHA-256 is kept, so a copy of this table signs nobody in. token_hash is
-- the configured hash of the token signed in with: a request is served
-- only while that hash is still configured, so removing a token from the
-- configuration ends its sessions at once.
CREATE TABLE console_sessions (
    id_hash    TEXT   PRIMARY KEY,
    role       TEXT   NOT NULL CHECK (role IN ('operator', 'support')),
    token_hash TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    ended_at   BIGINT
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);
