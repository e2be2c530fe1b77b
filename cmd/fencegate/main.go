// Command fencegate is the one binary: the gateway (`serve`), its schema
// (`migrate`), access keys (`keys`), the operator's tools and the local
// development stack (`dev`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencegate/fencegate/internal/sysmon"
)

// command is one subcommand: `fencegate help` lists the summaries, in this
// order. run parses its own flags (newFlags: each command defines only the
// flags it uses, and prints them on -h).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is every subcommand; adding one is one line here.
var commands = []command{
	{"serve", "run the S3 gateway", cmdServe},
	{"migrate", "apply the database migrations this binary carries", cmdMigrate},
	{"keys", "manage access keys: create, list, grant, revoke, delete", cmdKeys},
	{"catalog", "'catalog import BUCKET': record what a bucket already holds, mark it complete", cmdCatalog},
	{"audit", "'audit BUCKET': compare the store with the catalog (--repair records); exit 3 on divergence", cmdAudit},
	{"status", "leases, sessions, unknown guards, uploads, reconciler backlog and passes, outbox (--json)", cmdStatus},
	{"reservations", "upload reservations: create, get, list, cancel (docs/RESERVATIONS.md)", cmdReservations},
	{"quota", "quota accounts: set, get, list", cmdQuota},
	{"targets", "event notification targets: 'targets add webhook|nats NAME', list, remove, redrive", cmdTargets},
	{"dev", "local stack: 'dev run' (behind make run), 'dev exec -- CMD' (behind make test)", cmdDev},
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "usage: fencegate <command> [flags] [args]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help      this list; 'fencegate help COMMAND' is 'fencegate COMMAND -h'

Each command takes only its own flags; 'fencegate COMMAND -h' lists them with
their FENCEGATE_* variables (a flag wins over its variable). After
'source .fencegate/env' (written by make run) every command works on that
stack with no flag. The flag reference: docs/FLAGS.md.
`)
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

func main() {
	if len(os.Args) < 2 {
		printUsage(os.Stderr)
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	if servesS3(name, args) {
		sysmon.Exec() // before anything starts: returns only if it has nothing to do
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if isHelp(name) {
		if len(args) == 0 {
			printUsage(os.Stdout)
			return
		}
		name, args = args[0], []string{"-h"}
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "fencegate: unknown command %q\n\n", name)
		printUsage(os.Stderr)
		os.Exit(2)
	}
	err := cmd.run(ctx, args)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		// -h printed the command's flags.
	default:
		fmt.Fprintf(os.Stderr, "fencegate %s: %v\n", name, err)
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		os.Exit(1)
	}
}

// servesS3 is whether the command runs a gateway in this process (`serve`,
// `dev run`), whose runtime monitor is kept from polling after every idle
// spell (internal/sysmon). The other commands are short-lived tools.
func servesS3(name string, args []string) bool {
	return name == "serve" || name == "dev" && len(args) > 0 && args[0] == "run"
}

// exitCode passes a child's exit status through `dev exec`.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
