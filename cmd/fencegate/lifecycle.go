package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lease"
)

// defineLifecycle adds the reconciler's lifecycle flags (docs/DESIGN.md, "The
// reconciler"; docs/OPERATING.md, "Configuration").
func (c *serveConfig) defineLifecycle(f envFlags) {
	l := &c.Lifecycle
	f.Duration(&l.Budget, "reconcile-budget", "FENCEGATE_RECONCILE_BUDGET", 5*time.Second, "time each reconciler work kind may run per pass")
	f.Int(&l.Batch, "reconcile-batch", "FENCEGATE_RECONCILE_BATCH", 100, "items a reconciler batch claims (1-100)")
	f.String(&c.ReconcileKinds, "reconcile-kinds", "FENCEGATE_RECONCILE_KINDS", strings.Join(lease.Kinds, ","), "reconciler work kinds this gateway runs")
	c.defineUploadAges(f)
	f.Duration(&l.UploadCreateGiveUp, "upload-create-give-up", "FENCEGATE_UPLOAD_CREATE_GIVE_UP", 0, "such a multipart upload not found at the store this long after its Create is marked failed (0: 10 x --upload-create-settle)")
	f.String(&l.ForeignUploads, "foreign-uploads", "FENCEGATE_FOREIGN_UPLOADS", lease.ForeignReport, "multipart uploads created straight at the store: report (only), or abort after --foreign-upload-age")
	f.Duration(&l.ForeignUploadAge, "foreign-upload-age", "FENCEGATE_FOREIGN_UPLOAD_AGE", 7*24*time.Hour, "with --foreign-uploads=abort: how old (since the store's Initiated) a foreign upload must be to be aborted")
	f.Int(&l.AuditPage, "audit-page", "FENCEGATE_AUDIT_PAGE", 1000, "keys per page of the incremental bucket audit (one page per bucket per pass)")
	f.String(&c.AuditBuckets, "audit-buckets", "FENCEGATE_AUDIT_BUCKETS", "", "comma-separated buckets the incremental audit covers (empty: every bucket the catalog knows)")
	f.Duration(&l.Retention.Attempts, "retain-attempts", "FENCEGATE_RETAIN_ATTEMPTS", 7*24*time.Hour, "settled attempts (committed, adopted, failed, aborted), and ended reservations with their events, are pruned after this (0: never); unknown guards never are")
	f.Duration(&l.Retention.Outbox, "retain-outbox", "FENCEGATE_RETAIN_OUTBOX", 7*24*time.Hour, "outbox rows every registered consumer acknowledged are pruned after this (0: never); see docs/OUTBOX.md")
	f.Duration(&l.Retention.Leases, "retain-leases", "FENCEGATE_RETAIN_LEASES", 24*time.Hour, "lease rows of keys without live work are pruned after this long idle (0: never)")
}

// defineUploadAges adds the two ages that decide how a multipart upload is
// counted: the reconciler's, and `fencegate status`'s.
func (c *serveConfig) defineUploadAges(f envFlags) {
	l := &c.Lifecycle
	f.Duration(&l.UploadIdle, "upload-abandoned-after", "FENCEGATE_UPLOAD_ABANDONED_AFTER", 24*time.Hour, "a multipart upload created through fencegate with no new part for this long (and not being completed) is aborted")
	f.Duration(&l.UploadCreateSettle, "upload-create-settle", "FENCEGATE_UPLOAD_CREATE_SETTLE", lease.DefaultUploadCreateSettle, "a multipart upload whose CreateMultipartUpload left no upload id in the catalog (answer lost, or not recorded) is looked for at the store and bound once its Create is this old")
}

func (c *serveConfig) lifecycle() lease.LifecycleConfig {
	l := c.Lifecycle
	l.Interval = c.Reconcile
	l.Kinds, l.AuditBuckets = nil, nil
	for _, b := range strings.Split(c.AuditBuckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			l.AuditBuckets = append(l.AuditBuckets, b)
		}
	}
	for _, k := range strings.Split(c.ReconcileKinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			l.Kinds = append(l.Kinds, k)
		}
	}
	return l
}

func (c *serveConfig) validateLifecycle() error {
	l := c.lifecycle()
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--reconcile-budget", l.Budget}, {"--upload-abandoned-after", l.UploadIdle}, {"--upload-create-settle", l.UploadCreateSettle},
		{"--foreign-upload-age", l.ForeignUploadAge}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be a positive duration (got %v)", d.flag, d.v)
		}
	}
	if l.Batch < 1 || l.AuditPage < 1 {
		return fmt.Errorf("--reconcile-batch and --audit-page must be positive")
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("reconciler: %w", err)
	}
	return nil
}
