package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// /readyz names what is down but never says why; the reason is logged.
func TestAdminReadyzHidesErrors(t *testing.T) {
	secret := "dial tcp db.internal:5432: password authentication failed for user admin"
	s := startUnitServer(t, nil, Check{Name: "postgres", Run: func(context.Context) error { return errors.New(secret) }})
	status, body := getText(t, s.admin+"/readyz")
	if status != 503 || !strings.Contains(body, "postgres: down") || !strings.Contains(body, "store: down") {
		t.Fatalf("/readyz: %d %q", status, body)
	}
	if strings.Contains(body, "password") || strings.Contains(body, "dial") || strings.Contains(body, "127.0.0.1") {
		t.Fatalf("/readyz shows the error: %q", body)
	}
}

// With an admin token, /readyz and /metrics need it; /healthz does not.
func TestAdminToken(t *testing.T) {
	s := startUnitServer(t, func(c *Config) { c.AdminToken = "s3cret-token" })
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/metrics", "", 401},
		{"/metrics", "Bearer wrong", 401},
		{"/metrics", "Bearer s3cret-token-and-more", 401},
		{"/metrics", "s3cret-token", 401},
		{"/metrics", "Bearer s3cret-token", 200},
		{"/readyz", "", 401},
		{"/readyz", "Bearer s3cret-token", 503}, // admitted; the dead store makes it not ready
	} {
		var h []string
		if c.auth != "" {
			h = []string{"Authorization", c.auth}
		}
		if got, _ := getText(t, s.admin+c.path, h...); got != c.want {
			t.Errorf("%s with %q: %d, want %d", c.path, c.auth, got, c.want)
		}
	}
}
