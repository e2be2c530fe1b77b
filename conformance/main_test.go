// Package conformance holds the end-to-end tests: unmodified S3 clients and
// fault interleavings against a real PostgreSQL and a real S3 store.
package conformance

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
