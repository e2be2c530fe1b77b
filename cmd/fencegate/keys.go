package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/meta"
)

const keysUsage = `usage: fencegate keys <create|list|grant|revoke|delete> [flags] [args]

  create [--description D] [GRANT...]   make a key; prints its id and secret once
  list                                  keys and their grants (never secrets)
  grant KEY GRANT...                    add grants
  revoke KEY GRANT...                   remove grants
  delete KEY                            remove a key

GRANT is PERMISSION:BUCKET, PERMISSION one of read, write, admin, reserve
(upload reservations, docs/RESERVATIONS.md); BUCKET '*' is every bucket.
Every subcommand takes the flags below (--description: create only).
`

// newGrants parses grants to create or add: each names '*' or a bucket
// name a request could address (gateway.ValidBucketName), so that a typo
// such as "write:*x" (grants have no patterns) is not stored as a grant on
// a bucket that can never exist.
func newGrants(args []string) ([]meta.Grant, error) {
	grants, err := parseGrants(args)
	for _, g := range grants {
		if g.Bucket != meta.AllBuckets && !gateway.ValidBucketName(g.Bucket) {
			return nil, fmt.Errorf("grant %s:%s: the bucket is neither '*' nor a bucket name (3-255 letters, digits, '.', '-', '_'); grants have no patterns",
				g.Permission, g.Bucket)
		}
	}
	return grants, err
}

// parseGrants parses PERMISSION:BUCKET arguments; a revoke takes them so,
// whatever the bucket's name.
func parseGrants(args []string) ([]meta.Grant, error) {
	var out []meta.Grant
	for _, a := range args {
		p, b, ok := strings.Cut(a, ":")
		if !ok || b == "" {
			return nil, fmt.Errorf("grant %q: want PERMISSION:BUCKET", a)
		}
		perm, err := meta.ParsePermission(p)
		if err != nil {
			return nil, err
		}
		out = append(out, meta.Grant{Bucket: b, Permission: perm})
	}
	return out, nil
}

func cmdKeys(ctx context.Context, args []string) error {
	f := newFlags("keys", keysUsage)
	var dbURL, serverKey, serverKeyFile, description string
	f.StringVar(&description, "description", "", "what the key is for (create)")
	f.database(&dbURL)
	f.serverKey(&serverKey, &serverKeyFile)
	if len(args) == 0 {
		f.Usage()
		return errors.New("missing subcommand")
	}
	if isHelp(args[0]) {
		return f.Parse(args[:1])
	}
	sub := args[0]
	switch sub {
	case "create", "list", "grant", "revoke", "delete":
	default:
		return fmt.Errorf("unknown subcommand %q: one of create, list, grant, revoke, delete", sub)
	}
	if err := f.Parse(args[1:]); err != nil {
		return err
	}
	if description != "" && sub != "create" {
		return errors.New("--description is for keys create")
	}
	keys, closeKeys, err := openKeys(ctx, dbURL, serverKey, serverKeyFile)
	if err != nil {
		return err
	}
	defer closeKeys()
	rest := f.Args()
	switch sub {
	case "create":
		grants, err := newGrants(rest)
		if err != nil {
			return err
		}
		k, err := keys.Create(ctx, description, grants)
		if err != nil {
			return err
		}
		fmt.Printf("AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", k.ID, k.Secret)
	case "list":
		all, _, err := keys.All(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACCESS KEY\tCREATED\tGRANTS\tDESCRIPTION")
		for _, k := range all {
			var gs []string
			for _, g := range k.Grants {
				gs = append(gs, string(g.Permission)+":"+g.Bucket)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.CreatedAt.Format(time.RFC3339), strings.Join(gs, ","), k.Description)
		}
		return tw.Flush()
	case "grant", "revoke":
		if len(rest) < 2 {
			return fmt.Errorf("usage: fencegate keys %s KEY GRANT...", sub)
		}
		parse := parseGrants
		if sub == "grant" {
			parse = newGrants
		}
		grants, err := parse(rest[1:])
		if err != nil {
			return err
		}
		if sub == "grant" {
			return keys.Grant(ctx, rest[0], grants...)
		}
		return keys.Revoke(ctx, rest[0], grants...)
	case "delete":
		if len(rest) != 1 {
			return errors.New("usage: fencegate keys delete KEY")
		}
		return keys.Delete(ctx, rest[0])
	}
	return nil
}

func openKeys(ctx context.Context, dbURL, serverKey, serverKeyFile string) (*meta.Keys, func(), error) {
	text, err := loadServerKey(serverKey, serverKeyFile)
	if err != nil {
		return nil, nil, err
	}
	key, err := meta.ParseServerKey(text)
	if err != nil {
		return nil, nil, err
	}
	sealer, err := meta.NewSealer(key)
	if err != nil {
		return nil, nil, err
	}
	pool, err := meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2, ConnectTimeout: 10 * time.Second, ApplicationName: "fencegate keys"})
	if err != nil {
		return nil, nil, err
	}
	return &meta.Keys{Pool: pool, Sealer: sealer}, pool.Close, nil
}
