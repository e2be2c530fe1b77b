package meta

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

func testKeys(t *testing.T) *Keys {
	sealer, err := NewSealer(mustServerKey(t, NewServerKey()))
	if err != nil {
		t.Fatal(err)
	}
	return &Keys{Pool: migratedPool(t), Sealer: sealer}
}

func mustServerKey(t *testing.T, s string) []byte {
	k, err := ParseServerKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeysLifecycle(t *testing.T) {
	ctx := context.Background()
	keys := testKeys(t)
	v0, err := keys.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, err := keys.Create(ctx, "app", []Grant{{Bucket: "photos", Permission: PermRead}})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Grant(ctx, k.ID, Grant{"photos", PermWrite}, Grant{AllBuckets, PermAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := keys.Revoke(ctx, k.ID, Grant{AllBuckets, PermAdmin}); err != nil {
		t.Fatal(err)
	}
	// Revoking a grant the key does not hold (a typo of a bucket) is an
	// error that names it, and revokes nothing of the rest.
	if err := keys.Revoke(ctx, k.ID, Grant{"photos", PermWrite}, Grant{"photo", PermRead}); !errors.Is(err, ErrNoSuchGrant) {
		t.Fatalf("revoke of a grant the key does not hold: %v, want ErrNoSuchGrant", err)
	}
	all, v1, err := keys.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v1 <= v0 {
		t.Fatalf("version %d after changes, was %d", v1, v0)
	}
	var got *AccessKey
	for i := range all {
		if all[i].ID == k.ID {
			got = &all[i]
		}
	}
	if got == nil || got.Secret != k.Secret || got.Description != "app" {
		t.Fatalf("stored key %+v, want id %s with its secret", got, k.ID)
	}
	want := []Grant{{"photos", PermRead}, {"photos", PermWrite}}
	if len(got.Grants) != 2 || got.Grants[0] != want[0] || got.Grants[1] != want[1] {
		t.Fatalf("grants %v, want %v", got.Grants, want)
	}

	// The secret is sealed at rest: the row holds no plaintext.
	var sealed []byte
	if err := keys.Pool.QueryRow(ctx, `SELECT secret_sealed FROM access_keys WHERE access_key_id = $1`, k.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte(k.Secret)) {
		t.Fatal("secret stored in plaintext")
	}

	if err := keys.Delete(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if err := keys.Grant(ctx, k.ID, Grant{"x", PermRead}); !errors.Is(err, ErrNoSuchKey) {
		t.Fatalf("grant on deleted key: %v, want ErrNoSuchKey", err)
	}
}

func TestSealerRefusesOtherKeyAndRow(t *testing.T) {
	a, _ := NewSealer(mustServerKey(t, NewServerKey()))
	b, _ := NewSealer(mustServerKey(t, NewServerKey()))
	sealed := a.Seal("FGAAAAAAAAAAAAAAAAAA", "secret")
	if s, err := a.Open("FGAAAAAAAAAAAAAAAAAA", sealed); err != nil || s != "secret" {
		t.Fatalf("open = %q, %v", s, err)
	}
	if _, err := b.Open("FGAAAAAAAAAAAAAAAAAA", sealed); err == nil {
		t.Fatal("opened under another server key")
	}
	if _, err := a.Open("FGBBBBBBBBBBBBBBBBBB", sealed); err == nil {
		t.Fatal("opened as another access key's secret")
	}
	if _, err := ParseServerKey("short"); err == nil {
		t.Fatal("accepted a short server key")
	}
}
