// Package wiring connects the rooms: it adapts meta's PostgreSQL-backed stores
// to the interfaces gateway declares, for the binary and the end-to-end tests.
package wiring

import (
	"context"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/meta"
)

// KeySource serves gateway's key cache from meta.Keys.
type KeySource struct{ Keys *meta.Keys }

var permissions = map[meta.Permission]gateway.Permission{
	meta.PermRead: gateway.PermRead, meta.PermWrite: gateway.PermWrite, meta.PermAdmin: gateway.PermAdmin,
	meta.PermReserve: gateway.PermReserve,
}

func (k KeySource) LoadKeys(ctx context.Context) ([]gateway.AccessKey, int64, error) {
	all, v, err := k.Keys.All(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := make([]gateway.AccessKey, len(all))
	for i, a := range all {
		out[i] = gateway.AccessKey{ID: a.ID, Secret: a.Secret}
		for _, g := range a.Grants {
			out[i].Grants = append(out[i].Grants, gateway.Grant{Bucket: g.Bucket, Perm: permissions[g.Permission]})
		}
	}
	return out, v, nil
}

func (k KeySource) KeysVersion(ctx context.Context) (int64, error) { return k.Keys.Version(ctx) }
