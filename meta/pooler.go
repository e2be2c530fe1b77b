package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrTransactionPooler is the refusal of a database URL that reaches
// PostgreSQL through a pooler handing out server connections per
// transaction (PgBouncer's pool_mode=transaction or statement): fencegate
// keeps state in its sessions (statement_timeout set at connect, pgx's
// prepared statements, LISTEN for release wakeups, the migration's advisory
// lock), which such a pooler moves between clients (docs/OPERATING.md).
var ErrTransactionPooler = errors.New("the database URL reaches PostgreSQL through a connection pooler in transaction or statement mode (PgBouncer pool_mode=transaction): " +
	"fencegate keeps session state (statement_timeout, prepared statements, LISTEN) and refuses it; connect directly, or set the pooler's pool_mode=session")

// poolerStartupHint explains PgBouncer's refusal of the startup parameters
// fencegate sets on every connection.
const poolerStartupHint = "the database URL leads to a connection pooler that refuses fencegate's startup parameters (PgBouncer: %w); " +
	"fencegate needs session-level connections: connect directly, or use pool_mode=session with ignore_startup_parameters=statement_timeout and the timeout set on the role"

// wrapPoolerError names the pooler in a connect error that came from one.
func wrapPoolerError(err error) error {
	if err != nil && strings.Contains(err.Error(), "unsupported startup parameter") {
		return fmt.Errorf(poolerStartupHint, err)
	}
	return err
}

// CheckSessionPooling proves that a pool's connections keep their server
// session between transactions: one connection's backend is read, another
// connection opens a transaction, and the first asks again. Directly or
// through a session-mode pooler the answer is the same backend; a
// transaction-mode pooler hands the first connection another server
// connection (or, with one server connection, makes it wait for the
// other's transaction). It returns ErrTransactionPooler then. A pool of one
// connection cannot tell and passes.
func CheckSessionPooling(ctx context.Context, pool *pgxpool.Pool) error {
	if pool.Config().MaxConns < 2 {
		return nil
	}
	a, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	// The simple protocol: no prepared statement that a pooler could lose.
	const q = `SELECT pg_backend_pid()`
	var first, other, again int32
	if err := a.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&first); err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w (BEGIN failed: %v)", ErrTransactionPooler, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := tx.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&other); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := a.QueryRow(wctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&again); err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w (a query waited for another connection's transaction)", ErrTransactionPooler)
		}
		return err
	}
	if again != first {
		return fmt.Errorf("%w (one connection's server backend changed from %d to %d between transactions)", ErrTransactionPooler, first, again)
	}
	return nil
}
