package meta

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Permission is what a grant allows on a bucket.
type Permission string

const (
	PermRead  Permission = "read"
	PermWrite Permission = "write"
	PermAdmin Permission = "admin"
	// PermReserve makes upload reservations (docs/RESERVATIONS.md).
	PermReserve Permission = "reserve"
)

// AllBuckets in a grant means every bucket.
const AllBuckets = "*"

func ParsePermission(s string) (Permission, error) {
	switch p := Permission(s); p {
	case PermRead, PermWrite, PermAdmin, PermReserve:
		return p, nil
	}
	return "", fmt.Errorf("permission %q: want read, write, admin or reserve", s)
}

// Grant is one (bucket, permission) pair of a key.
type Grant struct {
	Bucket     string
	Permission Permission
}

// AccessKey is a key with its secret opened and its grants.
type AccessKey struct {
	ID          string
	Secret      string
	Description string
	CreatedAt   time.Time
	Grants      []Grant
}

var ErrNoSuchKey = errors.New("no such access key")

// Keys stores access keys and grants.
type Keys struct {
	Pool   *pgxpool.Pool
	Sealer *Sealer
}

const keyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
const secretAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

func randomString(alphabet string, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)] // both alphabets divide 256
	}
	return string(b)
}

// NewKeyPair makes a random access key id (prefix, then random characters up
// to 20 in all) and a random 40-character secret.
func NewKeyPair(prefix string) (id, secret string) {
	return prefix + randomString(keyAlphabet, max(20-len(prefix), 8)), randomString(secretAlphabet, 40)
}

// Create makes a new key with a random id ("FG" + 18 characters) and a random
// 40-character secret, with the given grants.
func (k *Keys) Create(ctx context.Context, description string, grants []Grant) (AccessKey, error) {
	id, secret := NewKeyPair("FG")
	key := AccessKey{ID: id, Secret: secret, Description: description}
	return key, k.Import(ctx, key.ID, key.Secret, description, grants)
}

// Import stores a key whose id and secret the caller chose (for example a
// development key that must survive restarts).
func (k *Keys) Import(ctx context.Context, id, secret, description string, grants []Grant) error {
	return pgx.BeginFunc(ctx, k.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO access_keys (access_key_id, secret_sealed, description) VALUES ($1, $2, $3)`,
			id, k.Sealer.Seal(id, secret), description); err != nil {
			return err
		}
		for _, g := range grants {
			if err := grant(ctx, tx, id, g); err != nil {
				return err
			}
		}
		return bumpKeysVersion(ctx, tx)
	})
}

func grant(ctx context.Context, tx pgx.Tx, id string, g Grant) error {
	_, err := tx.Exec(ctx, `INSERT INTO access_grants (access_key_id, bucket, permission) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, id, g.Bucket, string(g.Permission))
	return err
}

func bumpKeysVersion(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `UPDATE access_keys_version SET version = version + 1`)
	return err
}

// Grant adds grants to an existing key.
func (k *Keys) Grant(ctx context.Context, id string, grants ...Grant) error {
	return k.change(ctx, id, func(tx pgx.Tx) error {
		for _, g := range grants {
			if err := grant(ctx, tx, id, g); err != nil {
				return err
			}
		}
		return nil
	})
}

// ErrNoSuchGrant: a revoke named a grant the key does not hold.
var ErrNoSuchGrant = errors.New("no such grant")

// Revoke removes grants from a key, all or (one of them not held: an
// operator's typo, ErrNoSuchGrant naming it) none.
func (k *Keys) Revoke(ctx context.Context, id string, grants ...Grant) error {
	return k.change(ctx, id, func(tx pgx.Tx) error {
		for _, g := range grants {
			tag, err := tx.Exec(ctx, `DELETE FROM access_grants WHERE access_key_id = $1 AND bucket = $2 AND permission = $3`,
				id, g.Bucket, string(g.Permission))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: key %s holds no %s:%s (nothing revoked; `fencegate keys list` shows its grants)", ErrNoSuchGrant, id, g.Permission, g.Bucket)
			}
		}
		return nil
	})
}

// Delete removes a key and its grants.
func (k *Keys) Delete(ctx context.Context, id string) error {
	return k.change(ctx, id, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM access_keys WHERE access_key_id = $1`, id)
		return err
	})
}

func (k *Keys) change(ctx context.Context, id string, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, k.Pool, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM access_keys WHERE access_key_id = $1 FOR UPDATE`, id).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", ErrNoSuchKey, id)
			}
			return err
		}
		if err := fn(tx); err != nil {
			return err
		}
		return bumpKeysVersion(ctx, tx)
	})
}

// Version changes whenever any key or grant changes.
func (k *Keys) Version(ctx context.Context) (int64, error) {
	var v int64
	err := k.Pool.QueryRow(ctx, `SELECT version FROM access_keys_version`).Scan(&v)
	return v, err
}

// All loads every key with its opened secret and grants, and the version they
// were read at, in one snapshot.
func (k *Keys) All(ctx context.Context) ([]AccessKey, int64, error) {
	var keys []AccessKey
	var version int64
	err := pgx.BeginTxFunc(ctx, k.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT version FROM access_keys_version`).Scan(&version); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT access_key_id, secret_sealed, description, created_at FROM access_keys ORDER BY access_key_id`)
		if err != nil {
			return err
		}
		byID := map[string]int{}
		for rows.Next() {
			var key AccessKey
			var sealed []byte
			if err := rows.Scan(&key.ID, &sealed, &key.Description, &key.CreatedAt); err != nil {
				return err
			}
			if key.Secret, err = k.Sealer.Open(key.ID, sealed); err != nil {
				return err
			}
			byID[key.ID] = len(keys)
			keys = append(keys, key)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT access_key_id, bucket, permission FROM access_grants ORDER BY 1, 2, 3`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, bucket, perm string
			if err := rows.Scan(&id, &bucket, &perm); err != nil {
				return err
			}
			if i, ok := byID[id]; ok {
				keys[i].Grants = append(keys[i].Grants, Grant{Bucket: bucket, Permission: Permission(perm)})
			}
		}
		return rows.Err()
	})
	return keys, version, err
}
