//go:build failpoint || fencegate_brokenfence

package gateway

import "github.com/fencegate/fencegate/internal/failpoint"

// The tests' build of the gateway (-tags failpoint, which the conformance
// tests and the chaos campaign build their child gateways with) carries the
// failpoints of internal/failpoint; the product's build carries none
// (failpoint_off.go), so nothing of them is linked into fencegate.

// hitFailpoint kills the process at the named step of the write protocol if
// FENCEGATE_FAILPOINT names it.
func hitFailpoint(name string) { failpoint.Hit(name) }

// brokenFence leaves the fence out of every write: only in the deliberately
// broken build (-tags fencegate_brokenfence) the chaos campaign must catch.
const brokenFence = failpoint.BrokenFence
