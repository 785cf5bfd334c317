-- Session records. The columns the manager filters on are real columns;
-- the rest of the record is JSON in data, so adding a field needs no
-- migration.
CREATE TABLE sessions (
    id      TEXT PRIMARY KEY,
    owner   TEXT NOT NULL,
    state   TEXT NOT NULL,
    created INTEGER NOT NULL, -- unix nanoseconds, for ordering
    data    TEXT NOT NULL
);
CREATE INDEX sessions_owner ON sessions (owner, created);
