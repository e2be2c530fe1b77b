//go:build !failpoint && !fencegate_brokenfence

package gateway

// The product's build: no failpoints, the fence always set (failpoint_on.go
// is the tests' build). The calls compile to nothing.

func hitFailpoint(string) {}

const brokenFence = false
