-- Coordination between processes sharing one home. Records are updated by
-- compare-and-swap on revision; live records are counted by state when a
-- new one is admitted; leases say which process looks after what.
ALTER TABLE sessions ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
CREATE INDEX sessions_state ON sessions (state, owner);
CREATE TABLE leases (
    name    TEXT PRIMARY KEY,
    holder  TEXT NOT NULL,
    expires INTEGER NOT NULL -- unix nanoseconds
);
