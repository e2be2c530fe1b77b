package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate/gateway/reservations"
	"github.com/fencegate/fencegate/internal/wiring"
	"github.com/fencegate/fencegate/meta"
)

const reservationsUsage = `usage: fencegate reservations <create|get|list|cancel|complete> [flags] [args]

  create --bucket B (--key K | --prefix P) [--size N | --max-size N]
         [--sha256 BASE64 | --crc32c BASE64 | --crc64nvme BASE64]
         [--content-type T] [--expires 15m] [--account A] [--idempotency-key I]
         [--metadata JSON] [--json]        reserve one upload; prints it with its put_url and post form
  get ID [--json]                           one reservation
  list --bucket B [--json]                  a bucket's reservations, newest first
  cancel ID                                 end a live reservation, releasing its quota
  complete ID [--json]                      commit it on the bytes the store holds at its key
                                            (checked: size, checksum); through the gateway's API
                                            at --endpoint, signed with --access-key

The reservation is made for --access-key (default $AWS_ACCESS_KEY_ID); its put_url
and its browser form's policy (post) are presigned with that key's secret ($AWS_SECRET_ACCESS_KEY when it is that key,
else opened from the database with the server key) against --endpoint
(default $FENCEGATE_ENDPOINT), valid until the reservation expires.
See docs/RESERVATIONS.md.
`

func cmdReservations(ctx context.Context, args []string) error {
	f := newFlags("reservations", reservationsUsage)
	var dbURL, serverKey, serverKeyFile string
	f.database(&dbURL)
	f.serverKey(&serverKey, &serverKeyFile)
	var asJSON bool
	f.BoolVar(&asJSON, "json", false, "print JSON")
	var c reserveFlags
	f.StringVar(&c.bucket, "bucket", "", "create, list: the bucket")
	c.define(f)
	if len(args) == 0 {
		f.Usage()
		return errors.New("missing subcommand")
	}
	if isHelp(args[0]) {
		return f.Parse(args[:1])
	}
	sub := args[0]
	switch sub {
	case "create", "get", "list", "cancel", "complete":
	default:
		return fmt.Errorf("unknown subcommand %q: one of create, get, list, cancel, complete", sub)
	}
	if err := f.Parse(interleaved(f.FlagSet, args[1:])); err != nil {
		return err
	}
	pool, err := meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2, ConnectTimeout: 10 * time.Second, ApplicationName: "fencegate reservations"})
	if err != nil {
		return err
	}
	defer pool.Close()
	store := &meta.Reservations{Pool: pool}
	rest := f.Args()
	switch sub {
	case "create":
		q, err := c.request()
		if err != nil {
			return err
		}
		r, err := store.Create(ctx, q)
		if err != nil {
			return err
		}
		secret, err := c.secret(ctx, dbURL, serverKey, serverKeyFile)
		if err != nil {
			return err
		}
		v, err := presignedView(r, c.endpoint, c.region, secret, time.Now())
		if err != nil {
			return err
		}
		return printReservation(v, asJSON)
	case "complete":
		// The store's HEAD and the key's settle are the gateway's: the
		// command asks it, as an application would.
		if len(rest) != 1 {
			return errors.New("usage: fencegate reservations complete ID")
		}
		secret, err := c.secret(ctx, dbURL, serverKey, serverKeyFile)
		if err != nil {
			return err
		}
		api := &reservations.Client{Endpoint: c.endpoint, AccessKey: c.accessKey, SecretKey: secret, Region: c.region}
		v, err := api.Complete(ctx, rest[0])
		if err != nil {
			return err
		}
		return printReservation(v, asJSON)
	case "get", "cancel":
		if len(rest) != 1 {
			return fmt.Errorf("usage: fencegate reservations %s ID", sub)
		}
		var r meta.Reservation
		if sub == "get" {
			r, err = store.Get(ctx, rest[0])
		} else {
			r, err = store.End(ctx, rest[0], meta.ReservationCancelled)
		}
		if err != nil {
			return err
		}
		return printReservation(wiring.View(r), asJSON)
	case "list":
		if c.bucket == "" {
			return errors.New("--bucket is required")
		}
		all, err := store.List(ctx, c.bucket, 1000)
		if err != nil {
			return err
		}
		if asJSON {
			out := make([]reservations.Reservation, len(all))
			for i, r := range all {
				out[i] = wiring.View(r)
			}
			return json.NewEncoder(os.Stdout).Encode(out)
		}
		for _, r := range all {
			fmt.Printf("%s\t%s\t%s/%s\t%s\n", r.ID, r.State, r.Bucket, shown(r.Key), r.ExpiresAt.Format(time.RFC3339))
		}
		return nil
	}
	fmt.Fprint(os.Stderr, reservationsUsage)
	return fmt.Errorf("unknown subcommand %q", sub)
}

// interleaved moves positional arguments after the flags, so `get ID --json`
// parses as `get --json ID` (the flag package stops at the first positional).
func interleaved(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if fl := fs.Lookup(name); fl != nil {
			if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		}
	}
	return append(flags, pos...)
}

func printReservation(v reservations.Reservation, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(v)
	}
	fmt.Printf("id\t%s\nstate\t%s\nbucket\t%s\nkey\t%s\nexpires_at\t%s\n", v.ID, v.State, v.Bucket, shown(v.Key), v.ExpiresAt.Format(time.RFC3339))
	if header, value := v.ChecksumHeader(); header != "" {
		// As store.ChecksumValue writes it (and reservation_events records it).
		fmt.Printf("checksum\t%s:%s\n", strings.TrimPrefix(header, "x-amz-checksum-"), value)
	}
	if v.Size != nil {
		fmt.Printf("size\t%d\netag\t%s\n", *v.Size, v.ETag)
	}
	if v.PutURL != "" {
		fmt.Printf("put_url\t%s\n", v.PutURL)
		if header, value := v.ChecksumHeader(); header != "" {
			fmt.Printf("put_header\t%s: %s\n", header, value)
		}
	}
	if v.MultipartCreateURL != "" {
		fmt.Printf("multipart_create_url\t%s\n", v.MultipartCreateURL)
	}
	if v.Post != nil {
		fmt.Printf("post_url\t%s\n", v.Post.URL)
		names := make([]string, 0, len(v.Post.Fields))
		for n := range v.Post.Fields {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Printf("post_field\t%s=%s\n", n, v.Post.Fields[n])
		}
	}
	return nil
}

// reserveFlags are create's flags.
type reserveFlags struct {
	bucket, key, prefix, sha256, crc32c, crc64nvme, contentType, account, idem, metadata string
	size, maxSize                                                                        int64
	expires                                                                              time.Duration
	accessKey, endpoint, region                                                          string
}

func (c *reserveFlags) define(f envFlags) {
	f.StringVar(&c.key, "key", "", "the key to reserve")
	f.StringVar(&c.prefix, "prefix", "", "reserve a fresh key under this prefix (instead of --key)")
	f.Int64Var(&c.size, "size", -1, "the upload's exact size in bytes")
	f.Int64Var(&c.maxSize, "max-size", -1, "the upload's maximum size in bytes")
	f.StringVar(&c.sha256, "sha256", "", "the upload's SHA-256, base64 (as x-amz-checksum-sha256)")
	f.StringVar(&c.crc32c, "crc32c", "", "the upload's CRC32C, base64 (as x-amz-checksum-crc32c; instead of --sha256)")
	f.StringVar(&c.crc64nvme, "crc64nvme", "", "the upload's CRC64NVME, base64 (as x-amz-checksum-crc64nvme; instead of --sha256)")
	f.StringVar(&c.contentType, "content-type", "", "the upload's content type")
	f.DurationVar(&c.expires, "expires", 15*time.Minute, "how long the reservation lives (at most 7 days)")
	f.StringVar(&c.account, "account", "", "quota account the reserved bytes count against")
	f.StringVar(&c.idem, "idempotency-key", "", "the same key with the same request returns the same reservation")
	f.StringVar(&c.metadata, "metadata", "", "application metadata (JSON) carried with the reservation's events")
	f.String(&c.accessKey, "access-key", "AWS_ACCESS_KEY_ID", "", "the access key the reservation is made for, and its URL signed with")
	f.String(&c.endpoint, "endpoint", "FENCEGATE_ENDPOINT", "", "the gateway's S3 endpoint, for put_url")
	f.String(&c.region, "region", "AWS_REGION", "us-east-1", "the region put_url is signed for")
}

func (c *reserveFlags) request() (meta.ReservationRequest, error) {
	q := reservations.CreateRequest{Bucket: c.bucket, Key: c.key, Prefix: c.prefix, Account: c.account,
		SHA256: c.sha256, CRC32C: c.crc32c, CRC64NVME: c.crc64nvme, ContentType: c.contentType, IdempotencyKey: c.idem, Expires: c.expires.String()}
	if c.size >= 0 {
		q.Size = &c.size
	}
	if c.maxSize >= 0 {
		q.MaxSize = &c.maxSize
	}
	if c.metadata != "" {
		q.Metadata = json.RawMessage(c.metadata)
	}
	if c.endpoint == "" {
		return meta.ReservationRequest{}, errors.New("no endpoint for put_url: set --endpoint or FENCEGATE_ENDPOINT (source .fencegate/env)")
	}
	return wiring.Request(c.accessKey, q)
}

// secret is the reserving key's secret, for presigning.
func (c *reserveFlags) secret(ctx context.Context, dbURL, serverKey, serverKeyFile string) (string, error) {
	if s := os.Getenv("AWS_SECRET_ACCESS_KEY"); s != "" && c.accessKey == os.Getenv("AWS_ACCESS_KEY_ID") {
		return s, nil
	}
	keys, closeKeys, err := openKeys(ctx, dbURL, serverKey, serverKeyFile)
	if err != nil {
		return "", err
	}
	defer closeKeys()
	all, _, err := keys.All(ctx)
	if err != nil {
		return "", err
	}
	for _, k := range all {
		if k.ID == c.accessKey {
			return k.Secret, nil
		}
	}
	return "", fmt.Errorf("access key %q: %w", c.accessKey, meta.ErrNoSuchKey)
}

// presignedView is r as printed, with its presigned PUT when it is live.
func presignedView(r meta.Reservation, endpoint, region, secret string, now time.Time) (reservations.Reservation, error) {
	v := wiring.View(r)
	return v, reservations.Presign(&v, endpoint, region, secret, now)
}
