//go:build !failpoint && !fencegate_brokenfence

package gateway

// The product's build: no failpoints, the fence always set (failpoint_on.go
// is the tests' build). The calls compile to nothing.

import "github.com/fencegate/fencegate/lease"

func hitFailpoint(string) {}

// LifecycleFailpoints is nil: the lifecycle service's steps go untold.
func LifecycleFailpoints() func(st lease.Step, bucket, key string) { return nil }

const brokenFence = false
