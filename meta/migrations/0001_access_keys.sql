-- Access keys that clients sign with, and the buckets each may use.
-- The secret is sealed (AES-256-GCM) under the gateway's server key: a dump of
-- this table alone does not let anyone sign requests.
CREATE TABLE access_keys (
    access_key_id text PRIMARY KEY CHECK (access_key_id ~ '^[A-Z0-9]{16,128}$'),
    secret_sealed bytea NOT NULL,
    description   text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- bucket '*' grants the permission on every bucket. admin covers bucket create
-- and delete; write covers object writes; read covers reads and listings.
CREATE TABLE access_grants (
    access_key_id text NOT NULL REFERENCES access_keys ON DELETE CASCADE,
    bucket        text NOT NULL,
    permission    text NOT NULL CHECK (permission IN ('read', 'write', 'admin')),
    PRIMARY KEY (access_key_id, bucket, permission)
);

-- Every change to keys or grants bumps this, so gateways can notice and reload
-- their in-memory key cache without a round trip per request.
CREATE TABLE access_keys_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO access_keys_version VALUES (true, 1);
