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

// Upload is a multipart upload's attempt as the gateway needs it at Complete.
type Upload struct {
	AttemptID  string
	Bucket     string
	Key        string
	ETag       string
	Generation int64
	state      string
}

// UploadOf reads an upload's attempt row.
func UploadOf(a Attempt) Upload {
	return Upload{AttemptID: a.ID, Bucket: a.Bucket, Key: a.Key, ETag: a.ETag, Generation: a.Generation, state: a.State}
}

// Published reports an upload whose Complete became a generation (committed,
// or adopted after an unknown outcome): a repeated Complete gets that answer.
func (u Upload) Published() bool {
	return u.state == StateCommitted || u.state == StateAdopted
}
