//go:build failpoint || fencegate_brokenfence

package gateway

import (
	"github.com/fencegate/fencegate/internal/failpoint"
	"github.com/fencegate/fencegate/lease"
)

// The tests' build of the gateway (-tags failpoint, which the conformance
// tests and the chaos campaign build their child gateways with) carries the
// failpoints of internal/failpoint; the product's build carries none
// (failpoint_off.go), so nothing of them is linked into fencegate.

// hitFailpoint kills the process at the named step of the write protocol if
// FENCEGATE_FAILPOINT names it.
func hitFailpoint(name string) { failpoint.Hit(name) }

// LifecycleFailpoints is the lifecycle service's step hook
// (lease.LifecycleConfig.At) that kills the process at the step of a
// reservation's sweep FENCEGATE_FAILPOINT names (sweep-after-claim, ...),
// in FENCEGATE_FAILPOINT_BUCKET's bucket when that is set: lease knows no
// failpoints, the gateway's tests' build hands it this.
func LifecycleFailpoints() func(st lease.Step, bucket, key string) {
	return func(st lease.Step, bucket, _ string) { failpoint.HitIn(string(st), bucket) }
}

// brokenFence leaves the fence out of every write: only in the deliberately
// broken build (-tags fencegate_brokenfence) the chaos campaign must catch.
const brokenFence = failpoint.BrokenFence
