package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencegate/fencegate/internal/stack"
)

// natsProc is Debian's nats-server with JetStream on a fixed port and store
// folder, so that it can be killed and started again with its stream.
type natsProc struct {
	dir  string
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *os.File
}

// natsServerBin is Debian's nats-server (in /usr/sbin, often not on a
// user's PATH; scripts/ensure-deps.sh --chaos installs it).
func natsServerBin() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	return "/usr/sbin/nats-server"
}

func startNATS(dir string) (*natsProc, error) {
	if _, err := os.Stat(natsServerBin()); err != nil {
		return nil, fmt.Errorf("nats-server not found (scripts/ensure-deps.sh --chaos installs it): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := stack.FreePort()
	if err != nil {
		return nil, err
	}
	n := &natsProc{dir: dir, port: port}
	return n, n.start()
}

func (n *natsProc) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// start starts the server (a no-op while it runs) and waits until it accepts.
func (n *natsProc) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(n.dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(natsServerBin(), "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-sd", filepath.Join(n.dir, "js"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	n.cmd, n.log = cmd, log
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(n.port))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server does not accept on port %d (log in %s): %w", n.port, n.dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill signals the server and waits for it to exit (SIGKILL after 10 s).
func (n *natsProc) kill(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-done
	}
	n.log.Close()
	n.cmd, n.log = nil, nil
}

func (n *natsProc) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(n.url(), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// createStream makes the file-backed stream that captures the subject, its
// duplicate window (JetStream drops a message whose Nats-Msg-Id, the event
// id, it has seen within it) longer than any campaign's faults.
func (n *natsProc) createStream(ctx context.Context) error {
	nc, js, err := n.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: natsStream, Subjects: []string{natsSubject},
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute})
	return err
}

// events reads the stream back in order.
func (n *natsProc) events(ctx context.Context) ([]receivedEvent, error) {
	nc, js, err := n.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	str, err := js.Stream(ctx, natsStream)
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []receivedEvent
	var errs []error
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := str.GetMsg(ctx, seq)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream message %d: %w", seq, err))
			continue
		}
		e, err := parseEvent(m.Data)
		if err != nil {
			errs = append(errs, fmt.Errorf("stream message %d: %w", seq, err))
			continue
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != e.ID {
			errs = append(errs, fmt.Errorf("stream message %d: Nats-Msg-Id %q, event id %q", seq, id, e.ID))
		}
		e.Acked = true
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}
