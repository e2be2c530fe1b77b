package lease

// The write protocol's vocabulary, as the gateway speaks it: a lease ends in
// Commit(Landed), Fail or Unknown; meta's rows and states stay below lease.

// Landed is what the store acknowledged a write left at its key.
type Landed struct {
	ETag    string // without quotes
	Size    int64  // -1: not known
	Deleted bool
}

// Fail ends the attempt as proven not written (the store refused it, its body
// never completed, nothing was sent) and releases the lease.
func (l *Lease) Fail(reason string) { l.Finish(StateFailed, reason) }

// Unknown ends the attempt with an unknown outcome (it may have landed): it
// stays as a guard until it is settled, and the lease is released.
func (l *Lease) Unknown(reason string) { l.Finish(StateUnknown, reason) }
