// Package history records what a chaos campaign did and checks it.
//
// A campaign drives S3 clients against several gateways and writes at the
// store directly while faults are injected. Every operation it makes is one
// Op. Check decides with porcupine whether the operations on each key are
// linearizable against a register that holds a value or nothing and a
// generation (the x-fencegate-generation the gateways hand out);
// RealTimeGenerations and LostAcks check the generations themselves against
// real time and against the catalog's generation history.
//
// The model is one register per key ("bucket/key"): its state is whether an
// object exists, its value, and a lower bound of its current generation (a
// lower bound because writes straight at the store, and writes whose outcome
// is unknown, get a generation only later, from the reconciler, and that
// number never reaches the history).
package history

import "fmt"

// Kind is what an operation does to its key.
type Kind string

// The kinds of operations a campaign records.
const (
	Read   Kind = "read"   // GetObject: Value is what was read; Outcome Absent for a 404
	Write  Kind = "write"  // PutObject, CopyObject, CompleteMultipartUpload, or a PUT straight at the store
	Delete Kind = "delete" // DeleteObject, one entry of DeleteObjects, or a DELETE straight at the store
)

// Cond is the precondition a client sent with a write or delete.
type Cond string

// The preconditions S3 clients send.
const (
	NoCond      Cond = ""
	IfMatch     Cond = "if-match"      // CondValue: the value whose ETag the client sent in If-Match
	IfNoneMatch Cond = "if-none-match" // If-None-Match: *
)

// Outcome is what the client learned of its operation.
type Outcome string

// The outcomes of an operation.
const (
	OK                 Outcome = "ok"
	Absent             Outcome = "absent"              // a read found no object
	PreconditionFailed Outcome = "precondition-failed" // 412: definite, the condition was false, no effect
	Failed             Outcome = "failed"              // definite: the operation had no effect
	Unknown            Outcome = "unknown"             // the client never learned the outcome
)

// Op is one operation of a campaign, as its client saw it (and, for an
// outcome the client did not learn, as the campaign settled it afterwards).
type Op struct {
	ID        int64   `json:"id"`
	Client    int     `json:"client"`
	Gateway   int     `json:"gateway"` // the gateway used; -1 for an operation straight at the store, Balancer through the load balancer
	Key       string  `json:"key"`     // "bucket/key"
	Kind      Kind    `json:"kind"`
	Value     string  `json:"value,omitempty"` // written value (every write writes a distinct value; copies write their source's value, which is fixed), or the value read
	Cond      Cond    `json:"cond,omitempty"`
	CondValue string  `json:"cond_value,omitempty"`
	Outcome   Outcome `json:"outcome"`
	Gen       int64   `json:"gen,omitempty"`     // the generation a gateway returned for an acknowledged write or delete (x-fencegate-generation); 0 when none
	ETag      string  `json:"etag,omitempty"`    // the ETag the gateway/store answered, if any
	Invoke    int64   `json:"invoke"`            // ns since the campaign start
	Return    int64   `json:"return"`            // ns since the campaign start, when the answer (or the error) arrived
	Detail    string  `json:"detail,omitempty"`  // status, S3 code, error text
	Settled   string  `json:"settled,omitempty"` // for an outcome the client did not learn: how it was settled afterwards (filled by the campaign)
	// Before, for an Unknown write whose attempt fencegate closed past its
	// guard horizon, is the first generation after the close: the write can
	// no longer land, but may have landed before (and been overwritten
	// around the gateway), so it takes effect, if at all, while the key's
	// generation is below it.
	Before int64 `json:"before,omitempty"`
	// Answered: a gateway itself answered (an HTTP status, not through the
	// balancer, whose own 502 or cut connection says nothing of the gateway
	// behind it). The gateway had then finished with the request: any
	// attempt of it began before Return. Without an answer the gateway may
	// go on with the request after the client's return.
	Answered bool `json:"answered,omitempty"`
}

// Balancer is the Gateway of an operation sent through the load balancer in
// front of the gateways (the cluster stack's HAProxy): it reached whichever
// gateway the balancer chose, which the check needs no more than any other
// gateway's number (every gateway serves every key).
const Balancer = 100

// Direct reports whether the operation went straight at the store, around
// every gateway.
func (o *Op) Direct() bool { return o.Gateway < 0 }

// Route names the way the operation went: "direct", "balancer" or
// "gateway N".
func (o *Op) Route() string {
	switch {
	case o.Direct():
		return "direct"
	case o.Gateway == Balancer:
		return "balancer"
	}
	return fmt.Sprintf("gateway %d", o.Gateway)
}

// Acknowledged reports whether a gateway numbered the operation's effect: an
// OK write or delete with a generation. Only those are bound by the
// generation checks.
func (o *Op) Acknowledged() bool {
	return o.Outcome == OK && o.Gen > 0 && (o.Kind == Write || o.Kind == Delete)
}

// openEnded reports whether a write's or delete's effect may come after its
// Return: its client never learned the outcome (Unknown), or learned it only
// through the campaign's settling afterwards (Settled). Return is then only
// when the client gave up, not a bound on when the store or a gateway acted:
// a write held in a gateway or in the network can still land later.
func (o *Op) openEnded() bool {
	return o.Kind != Read && (o.Outcome == Unknown || o.Settled != "")
}
