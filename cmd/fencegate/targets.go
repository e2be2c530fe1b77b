package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/meta"
)

const targetsUsage = `usage: fencegate targets <add|list|remove|redrive> [flags] [args]

  add webhook NAME --url URL [--secret S]       an HTTP(S) endpoint; deliveries are signed with S
  add nats NAME --url nats://HOST:PORT --subject SUBJ   a NATS JetStream subject
  list                                          targets, their ARNs, queues and dead letters
  remove NAME                                   a target no bucket configuration names
  redrive NAME                                  send a target's dead letters again

A bucket's notification configuration names a target by its ARN,
arn:fencegate:sqs::NAME:KIND (docs/NOTIFICATIONS.md). --json prints JSON.
`

// targetJSON is a target as the command prints it.
type targetJSON struct {
	Name        string    `json:"name"`
	Kind        string    `json:"kind"`
	ARN         string    `json:"arn"`
	URL         string    `json:"url"`
	Subject     string    `json:"subject,omitempty"`
	HasSecret   bool      `json:"has_secret"`
	CreatedAt   time.Time `json:"created_at"`
	Queued      int64     `json:"queued"`
	DeadLetters int64     `json:"dead_letters"`
}

func cmdTargets(ctx context.Context, args []string) error {
	f := newFlags("targets", targetsUsage)
	var dbURL, serverKey, serverKeyFile, url, secret, subject string
	var asJSON bool
	f.database(&dbURL)
	f.serverKey(&serverKey, &serverKeyFile)
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&url, "url", "", "add: the webhook's http(s):// URL, or the NATS server's nats:// URL")
	f.StringVar(&secret, "secret", "", "add webhook: the key of the X-Fencegate-Signature HMAC-SHA256")
	f.StringVar(&subject, "subject", "", "add nats: the subject events are published on")
	if len(args) == 0 {
		f.Usage()
		return errors.New("missing subcommand")
	}
	if isHelp(args[0]) {
		return f.Parse(args[:1])
	}
	sub := args[0]
	switch sub {
	case "add", "list", "remove", "redrive":
	default:
		return fmt.Errorf("unknown subcommand %q: one of add, list, remove, redrive", sub)
	}
	// Positional arguments may come before, between or after the flags
	// (`add webhook NAME --url U --json`): parse, take one, parse the rest.
	var rest []string
	for in := args[1:]; ; {
		if err := f.Parse(in); err != nil {
			return err
		}
		if f.NArg() == 0 {
			break
		}
		rest = append(rest, f.Arg(0))
		in = f.Args()[1:]
	}
	if sub != "add" && (url != "" || secret != "" || subject != "") {
		return errors.New("--url, --secret and --subject are add's")
	}
	targets, closeTargets, err := openTargets(ctx, dbURL, serverKey, serverKeyFile, sub == "add" && secret != "")
	if err != nil {
		return err
	}
	defer closeTargets()
	switch sub {
	case "add":
		if len(rest) != 2 {
			return errors.New("usage: fencegate targets add webhook|nats NAME --url URL [--secret S] [--subject SUBJ]")
		}
		if rest[0] == meta.TargetWebhook && subject != "" {
			return errors.New("--subject is for nats targets")
		}
		if rest[0] == meta.TargetNATS && secret != "" {
			return errors.New("--secret is for webhook targets")
		}
		t, err := targets.Add(ctx, meta.Target{Kind: rest[0], Name: rest[1], URL: url, Subject: subject, Secret: secret})
		if err != nil {
			return err
		}
		out := targetJSON{Name: t.Name, Kind: t.Kind, ARN: t.ARN(), URL: t.URL, Subject: t.Subject, HasSecret: t.HasSecret, CreatedAt: t.CreatedAt}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(out)
		}
		fmt.Println(out.ARN)
	case "list":
		if len(rest) != 0 {
			return errors.New("usage: fencegate targets list [--json]")
		}
		all, err := targets.All(ctx)
		if err != nil {
			return err
		}
		counts, err := targets.Counts(ctx)
		if err != nil {
			return err
		}
		out := make([]targetJSON, 0, len(all))
		for _, t := range all {
			c := counts[t.Name]
			out = append(out, targetJSON{Name: t.Name, Kind: t.Kind, ARN: t.ARN(), URL: t.URL, Subject: t.Subject,
				HasSecret: t.HasSecret, CreatedAt: t.CreatedAt, Queued: c.Queued, DeadLetters: c.DeadLetters})
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(out)
		}
		tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tARN\tURL\tSUBJECT\tQUEUED\tDEAD LETTERS")
		for _, t := range out {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", t.Name, t.ARN, t.URL, t.Subject, t.Queued, t.DeadLetters)
		}
		return tw.Flush()
	case "remove":
		if len(rest) != 1 {
			return errors.New("usage: fencegate targets remove NAME")
		}
		return targets.Remove(ctx, rest[0])
	case "redrive":
		if len(rest) != 1 {
			return errors.New("usage: fencegate targets redrive NAME")
		}
		n, err := targets.Redrive(ctx, rest[0])
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(os.Stdout).Encode(map[string]any{"name": rest[0], "redriven": n})
		}
		fmt.Printf("%d dead letters of %s queued again\n", n, rest[0])
	default:
		fmt.Fprint(os.Stderr, targetsUsage)
		return fmt.Errorf("unknown subcommand %q", sub)
	}
	return nil
}

// openTargets connects to the catalog; the server key is needed only to seal
// a secret (listing shows whether a target has one, never the secret).
func openTargets(ctx context.Context, dbURL, serverKey, serverKeyFile string, needKey bool) (*meta.Targets, func(), error) {
	t := &meta.Targets{}
	if needKey {
		text, err := loadServerKey(serverKey, serverKeyFile)
		if err != nil {
			return nil, nil, err
		}
		key, err := meta.ParseServerKey(text)
		if err != nil {
			return nil, nil, err
		}
		if t.Sealer, err = meta.NewSealer(key); err != nil {
			return nil, nil, err
		}
	}
	pool, err := meta.Open(ctx, dbURL, meta.PoolConfig{MaxConns: 2, ConnectTimeout: 10 * time.Second, ApplicationName: "fencegate targets"})
	if err != nil {
		return nil, nil, err
	}
	t.Pool = pool
	return t, pool.Close, nil
}
