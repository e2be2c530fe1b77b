package conformance

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencegate/fencegate/internal/testenv"
)

// natsServer is Debian's nats-server with JetStream, on a fixed port and
// store folder, so it can be killed and started again with its stream.
type natsServer struct {
	t         *testing.T
	port      int
	dir       string
	cmd       *exec.Cmd
	logPath   string
	startedAt time.Time
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	if _, err := os.Stat(natsServerBin()); err != nil {
		missingClient(t, fmt.Sprintf("nats-server not found: scripts/ensure-deps.sh --clients installs Debian's package (%v)", err))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &natsServer{t: t, port: port, dir: t.TempDir()}
	s.logPath = filepath.Join(s.dir, "nats.log")
	s.start()
	t.Cleanup(s.kill)
	return s
}

// natsServerBin is Debian's nats-server (in /usr/sbin, often not on a
// user's PATH).
func natsServerBin() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	return "/usr/sbin/nats-server"
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *natsServer) start() {
	s.cmd = exec.Command(natsServerBin(), "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(s.port), "-sd", filepath.Join(s.dir, "js"), "-l", s.logPath)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	waitFor(s.t, "nats-server to accept", 10*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (s *natsServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// NATS JetStream killed (SIGKILL) and started again mid-workload: every
// committed event ends up in the stream, each key's in generation order, and
// JetStream's deduplication by Nats-Msg-Id (the event id) leaves none twice.
func TestNotifyNATSKilledAndRestarted(t *testing.T) {
	ns := startNATS(t)
	subject := "fencegate.events." + randomSuffix()
	nc, err := nats.Connect(ns.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := "FG" + randomSuffix()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}

	g := startGatewayProcess(t, testenv.Store(t), fastNotifyEnv...)
	bucket := "t-notify-nats-" + randomSuffix()
	createBucket(t, g.Endpoint, bucket)
	tg := addTarget(t, "nats", "js-"+randomSuffix(), "--url", ns.url(), "--subject", subject)
	configureBucket(t, g.Endpoint, bucket, tg.ARN)
	mixedWorkload(t, g.Endpoint, bucket, 4, 8, 4*time.Second, 0, func() {
		time.Sleep(1500 * time.Millisecond)
		ns.kill()
		time.Sleep(time.Second)
		ns.start()
	})
	committed := committedEvents(t, bucket)
	waitFor(t, "the target's queue to drain", 60*time.Second, func() bool { return queueEmpty(t, tg.Name) })

	// Read the stream back in order.
	str, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []gotEvent
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream message %d: %v", seq, err)
		}
		e := parseEvent(t, m.Data)
		if m.Header.Get(jetstream.MsgIDHeader) != e.ID {
			t.Errorf("message %d: Nats-Msg-Id %q, event id %q", seq, m.Header.Get(jetstream.MsgIDHeader), e.ID)
		}
		e.Acked = true
		got = append(got, e)
	}
	dups := checkDelivered(t, committed, got, "")
	if dups > 0 {
		t.Errorf("%d duplicates in the stream despite Nats-Msg-Id", dups)
	}
	m := metricsOf(t, g.Admin)
	retried := m[`fencegate_notify_events_total{outcome="retried",target="`+tg.Name+`"}`]
	delivered := m[`fencegate_notify_events_total{outcome="delivered",target="`+tg.Name+`"}`]
	t.Logf("%d events committed, %d in the stream; the gateway counted %v delivered, %v retried", len(committed), len(got), delivered, retried)
	if retried == 0 {
		t.Error("no publish was retried: the server's death was not seen")
	}
	if len(committed) < 30 {
		t.Fatalf("only %d events committed", len(committed))
	}
}
