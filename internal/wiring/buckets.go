package wiring

import (
	"context"

	"github.com/fencegate/fencegate/meta"
)

// Buckets serves gateway's record of bucket changes from meta.Catalog.
type Buckets struct{ Catalog *meta.Catalog }

func (b Buckets) BucketCreated(ctx context.Context, bucket string) error {
	return b.Catalog.MarkBucket(ctx, bucket, true)
}

func (b Buckets) BucketDeleted(ctx context.Context, bucket string) error {
	return b.Catalog.ForgetBucket(ctx, bucket)
}
