//go:build !fencegate_brokenfence

package failpoint

// BrokenFence is false in every normal build (see brokenfence.go).
const BrokenFence = false
