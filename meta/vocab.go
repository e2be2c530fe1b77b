package meta

import "github.com/fencegate/fencegate/lease"

// The protocol's vocabulary is lease's (lease/vocab.go): meta stores it.
// These names keep meta's own code and its callers in its terms.
type (
	AcquireParams = lease.AcquireParams
	Acquired      = lease.Acquired
	Attempt       = lease.Attempt
	Entry         = lease.Entry
	KeyState      = lease.KeyState
	Held          = lease.Held
	Ending        = lease.Ending
	CommitParams  = lease.CommitParams
	Backlog       = lease.Backlog
	Upload        = lease.AbandonedUpload
	UnboundUpload = lease.UploadWithoutID
	Cursor        = lease.Cursor
	Retention     = lease.Retention
	Pruned        = lease.Pruned
	Pass          = lease.Pass
)

// Attempt states and generation origins (lease/vocab.go).
const (
	StateLeased    = lease.StateLeased
	StateOpen      = lease.StateOpen
	StateCommitted = lease.StateCommitted
	StateAdopted   = lease.StateAdopted
	StateUnknown   = lease.StateUnknown
	StateFailed    = lease.StateFailed
	StateAborted   = lease.StateAborted

	OriginFencegate = lease.OriginFencegate
	OriginAdopted   = lease.OriginAdopted
	OriginExternal  = lease.OriginExternal
)

// ErrLeaseLost: the caller's lease expired or was taken over; nothing was
// committed.
var ErrLeaseLost = lease.ErrLeaseLost

// NewID is a random UUID (version 4), the form of attempt ids.
func NewID() string { return lease.NewID() }
