// Command fencegate is the one binary: the gateway (`serve`), its schema
// (`migrate`), access keys (`keys`) and the local development stack (`dev`).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: fencegate <command> [flags]

commands:
  serve     run the S3 gateway
  migrate   apply the embedded database migrations
  keys      manage access keys: create, list, grant, revoke, delete
  catalog   'catalog import BUCKET': record what a bucket already holds, mark it complete
  audit     'audit BUCKET [--prefix P] [--repair]': store vs catalog; exit 3 on divergence
  status    leases, unknown guards, uploads, reconciler backlog and passes, outbox (--json)
  reservations  upload reservations: create, get, list, cancel (docs/RESERVATIONS.md)
  quota     quota accounts: set, get, list
  dev       local stack: 'dev run' (behind make run), 'dev exec -- CMD' (behind make test)

'fencegate <command> -h' lists a command's flags and their FENCEGATE_* variables.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmds := map[string]func(context.Context, []string) error{
		"serve":        cmdServe,
		"migrate":      cmdMigrate,
		"keys":         cmdKeys,
		"dev":          cmdDev,
		"catalog":      cmdCatalog,
		"audit":        cmdAudit,
		"status":       cmdStatus,
		"reservations": cmdReservations,
		"quota":        cmdQuota,
	}
	name, args := os.Args[1], os.Args[2:]
	fn, ok := cmds[name]
	if !ok {
		if name != "-h" && name != "--help" && name != "help" {
			fmt.Fprintf(os.Stderr, "fencegate: unknown command %q\n\n", name)
		}
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err := fn(ctx, args); err != nil {
		fmt.Fprintf(os.Stderr, "fencegate %s: %v\n", name, err)
		if code, ok := err.(exitCode); ok {
			os.Exit(int(code))
		}
		os.Exit(1)
	}
}

// exitCode passes a child's exit status through `dev exec`.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
