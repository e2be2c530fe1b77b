package wiring

import (
	"context"
	"errors"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/meta"
)

// Notifications serves gateway's bucket notification configurations from
// meta.Targets.
type Notifications struct{ Targets *meta.Targets }

func (n Notifications) BucketNotifications(ctx context.Context, bucket string) ([]gateway.NotificationRule, error) {
	rules, err := n.Targets.BucketNotifications(ctx, bucket)
	out := make([]gateway.NotificationRule, len(rules))
	for i, r := range rules {
		out[i] = gateway.NotificationRule(r)
	}
	return out, err
}

func (n Notifications) SetBucketNotifications(ctx context.Context, bucket string, rules []gateway.NotificationRule) error {
	in := make([]meta.NotificationRule, len(rules))
	for i, r := range rules {
		in[i] = meta.NotificationRule(r)
	}
	err := n.Targets.SetBucketNotifications(ctx, bucket, in)
	var unknown *meta.UnknownTargetsError
	if errors.As(err, &unknown) {
		return &gateway.UnknownTargetsError{ARNs: unknown.ARNs}
	}
	return err
}
