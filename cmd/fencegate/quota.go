package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencegate/fencegate/meta"
)

const quotaUsage = `usage: fencegate quota <set|get|list> [flags] [args]

  set ACCOUNT --bytes N [--objects N]   create an account or change its limits
  get ACCOUNT [--json]                  limit_bytes, reserved_bytes, used_bytes
  list [--json]                         every account
`

func cmdQuota(ctx context.Context, args []string) error {
	f := newFlags("quota", quotaUsage)
	var dbURL string
	f.database(&dbURL)
	var asJSON bool
	var limitBytes, limitObjects int64
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.Int64Var(&limitBytes, "bytes", -1, "set: the account's limit in bytes")
	f.Int64Var(&limitObjects, "objects", -1, "set: the account's limit in objects (default none)")
	if len(args) == 0 {
		f.Usage()
		return errors.New("missing subcommand")
	}
	if isHelp(args[0]) {
		return f.Parse(args[:1])
	}
	sub := args[0]
	switch sub {
	case "set", "get", "list":
	default:
		return fmt.Errorf("unknown subcommand %q: one of set, get, list", sub)
	}
	if err := f.Parse(interleaved(f.FlagSet, args[1:])); err != nil {
		return err
	}
	pool, err := meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2, ConnectTimeout: 10 * time.Second, ApplicationName: "fencegate quota"})
	if err != nil {
		return err
	}
	defer pool.Close()
	store := &meta.Reservations{Pool: pool}
	rest := f.Args()
	switch sub {
	case "set":
		if len(rest) != 1 || limitBytes < 0 {
			return errors.New("usage: fencegate quota set ACCOUNT --bytes N [--objects N]")
		}
		var objects *int64
		if limitObjects >= 0 {
			objects = &limitObjects
		}
		return store.SetQuota(ctx, rest[0], limitBytes, objects)
	case "get":
		if len(rest) != 1 {
			return errors.New("usage: fencegate quota get ACCOUNT [--json]")
		}
		q, err := store.GetQuota(ctx, rest[0])
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(q)
		}
		fmt.Printf("account\t%s\nlimit_bytes\t%d\nreserved_bytes\t%d\nused_bytes\t%d\n", q.Account, q.LimitBytes, q.ReservedBytes, q.UsedBytes)
		return nil
	case "list":
		all, err := store.Quotas(ctx)
		if err != nil {
			return err
		}
		if all == nil {
			all = []meta.Quota{}
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(all)
		}
		for _, q := range all {
			fmt.Printf("%s\t%d\t%d\t%d\n", q.Account, q.LimitBytes, q.ReservedBytes, q.UsedBytes)
		}
		return nil
	}
	fmt.Fprint(os.Stderr, quotaUsage)
	return fmt.Errorf("unknown subcommand %q", sub)
}
