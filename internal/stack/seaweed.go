package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SeaweedPorts are the listeners `weed mini` opens. Zero fields get free ports.
// They are chosen explicitly, rather than left to weed's own probing, so several
// instances on one machine never race for its defaults.
type SeaweedPorts struct {
	S3, Master, MasterGRPC, Filer, FilerGRPC, Volume, VolumeGRPC, S3GRPC, Admin, AdminGRPC int
}

func (p *SeaweedPorts) fill() error {
	for _, f := range []*int{&p.S3, &p.Master, &p.MasterGRPC, &p.Filer, &p.FilerGRPC, &p.Volume, &p.VolumeGRPC, &p.S3GRPC, &p.Admin, &p.AdminGRPC} {
		if *f != 0 {
			continue
		}
		port, err := FreePort()
		if err != nil {
			return err
		}
		*f = port
	}
	return nil
}

// Seaweed is a running `weed mini` (master, volume, filer and S3 in one process).
type Seaweed struct {
	Endpoint
	Dir   string
	Ports SeaweedPorts
	proc  *proc
}

// StartSeaweed starts SeaweedFS on loopback with data in dir and the given root
// credentials, and waits until its S3 API answers a signed ListBuckets.
func StartSeaweed(ctx context.Context, bin, dir string, ports SeaweedPorts, accessKey, secretKey string) (*Seaweed, error) {
	if err := ports.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	itoa := strconv.Itoa
	args := []string{"mini", "-dir=" + dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-webdav=false", "-admin.ui=false", "-master.telemetry=false",
		"-s3.port=" + itoa(ports.S3), "-s3.port.grpc=" + itoa(ports.S3GRPC),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-master.port=" + itoa(ports.Master), "-master.port.grpc=" + itoa(ports.MasterGRPC),
		"-filer.port=" + itoa(ports.Filer), "-filer.port.grpc=" + itoa(ports.FilerGRPC),
		"-volume.port=" + itoa(ports.Volume), "-volume.port.grpc=" + itoa(ports.VolumeGRPC),
		"-admin.port=" + itoa(ports.Admin), "-admin.port.grpc=" + itoa(ports.AdminGRPC), "-admin.port.legacy=0",
		"-s3.localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-s3-%d.sock", ports.S3)),
		"-filer.localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-filer-%d.sock", ports.Filer)),
	}
	env := append(os.Environ(), "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey)
	p, err := startProc("weed", filepath.Join(dir, "weed.log"), nil, env, bin, args...)
	if err != nil {
		return nil, err
	}
	s := &Seaweed{
		Endpoint: Endpoint{URL: fmt.Sprintf("http://127.0.0.1:%d", ports.S3), AccessKey: accessKey, SecretKey: secretKey, Region: "us-east-1"},
		Dir:      dir, Ports: ports, proc: p,
	}
	if err := waitS3(ctx, s.Endpoint, p.exited, 90*time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("SeaweedFS S3 on port %d not ready: %v\n%s", ports.S3, err, p.logTail())
	}
	return s, nil
}

// Stop ends SeaweedFS (SIGTERM, then kill after 15 s).
func (s *Seaweed) Stop() {
	if s != nil {
		s.proc.stop(syscall.SIGTERM, 15*time.Second)
	}
}

// Pid is weed's process id.
func (s *Seaweed) Pid() int { return s.proc.Pid() }
