// Package lease will hold per-key leases and their renewal, the fenced commit and
// the reconciler (DESIGN.md, W1-W10). It knows nothing of HTTP.
package lease
