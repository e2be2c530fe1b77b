package meta

import (
	"context"
	"fmt"
	"strings"
)

// Replication is how the server a pool talks to replicates its commits:
// what decides whether a commit it acknowledged survives a failover to a
// standby (docs/SCALING.md).
type Replication struct {
	SynchronousCommit string // the session's synchronous_commit
	StandbyNames      string // synchronous_standby_names
	// SyncStandbys counts standbys streaming as sync or quorum members;
	// -1 when this role may not see pg_stat_replication's sync_state
	// (neither superuser nor pg_read_all_stats).
	SyncStandbys int
}

// ReadReplication reads the server's replication settings and its
// synchronous standbys.
func ReadReplication(ctx context.Context, q Querier) (Replication, error) {
	var r Replication
	var visible bool
	var n int
	err := q.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
		pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
		(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))`).
		Scan(&r.SynchronousCommit, &r.StandbyNames, &visible, &n)
	if err != nil {
		return r, fmt.Errorf("read the database's replication settings: %w", err)
	}
	r.SyncStandbys = n
	if !visible {
		r.SyncStandbys = -1
	}
	return r, nil
}

// Risk says why a commit this server acknowledges may be missing from a
// standby promoted after it fails, or "" when every commit waits for a
// synchronous standby's flush (or apply). Without synchronous_standby_names
// (a lone server, or asynchronous standbys) an acknowledged commit may not
// have left the server when it dies; with synchronous_commit off or local
// it is acknowledged before any standby has it; with remote_write, before
// the standby has flushed it (lost only if both fail at once).
func (r Replication) Risk() string {
	switch {
	case strings.TrimSpace(r.StandbyNames) == "":
		return "synchronous_standby_names is empty: commits are acknowledged without waiting for any standby"
	case r.SynchronousCommit == "off" || r.SynchronousCommit == "local":
		return "synchronous_commit=" + r.SynchronousCommit + ": commits are acknowledged before a standby has them"
	case r.SynchronousCommit == "remote_write":
		return "synchronous_commit=remote_write: commits are acknowledged before the standby has flushed them (lost if both servers fail at once)"
	}
	return ""
}
