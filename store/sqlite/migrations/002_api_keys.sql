-- API keys. Only the SHA-256 of a key's secret is kept; id is the public
-- prefix `mcpbox key list` shows and `mcpbox key revoke` takes.
CREATE TABLE api_keys (
    id      TEXT PRIMARY KEY,
    owner   TEXT NOT NULL,
    name    TEXT NOT NULL DEFAULT '',
    hash    TEXT NOT NULL UNIQUE,
    created INTEGER NOT NULL, -- unix nanoseconds
    revoked INTEGER NOT NULL DEFAULT 0
);
