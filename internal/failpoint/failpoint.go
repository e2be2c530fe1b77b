// Package failpoint lets a test make the process die at a named step of the
// write protocol (docs/DESIGN.md): FENCEGATE_FAILPOINT=name kills the process
// with SIGKILL when Hit(name) runs. BrokenFence (-tags fencegate_brokenfence)
// is the other hook: a deliberate protocol bug for proving that the chaos
// campaign catches one. The gateway links this package only in the tests'
// build (-tags failpoint, gateway/failpoint_on.go); the product binary does
// not carry it (internal/layout checks).
package failpoint

import (
	"os"
	"syscall"
)

var (
	armed = os.Getenv("FENCEGATE_FAILPOINT")
	// armedBucket scopes the failpoints HitIn is told of to one bucket (""
	// every bucket): a test sharing its database with other tests'
	// leftovers makes its gateway die at its own bucket's step, not at
	// another's the same process reaches first.
	armedBucket = os.Getenv("FENCEGATE_FAILPOINT_BUCKET")
)

// HitIn is Hit for a step on bucket's objects, scoped by
// FENCEGATE_FAILPOINT_BUCKET when set.
func HitIn(name, bucket string) {
	if armedBucket == "" || armedBucket == bucket {
		Hit(name)
	}
}

// Hit kills the process if the named failpoint is armed.
func Hit(name string) {
	if armed != "" && armed == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never continue past the point
	}
}
