//go:build fencegate_brokenfence

package failpoint

// BrokenFence is true only in a binary built with -tags fencegate_brokenfence:
// the gateway then sends its writes without the fence (no If-Match /
// If-None-Match of its own), a deliberate protocol bug the chaos campaign must
// catch (conformance: TestChaosCatchesBrokenFence). Never in a release build.
const BrokenFence = true
