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

// SeaweedCluster is SeaweedFS as its operators deploy it: one master, a
// number of volume servers, a filer and the S3 gateway, each its own
// process, sharing one security.toml (JWT signing keys and the gRPC CA, as
// StartSeaweed's) in the cluster's folder.
type SeaweedCluster struct {
	Endpoint
	Dir     string
	Master  *proc
	Volumes []*proc
	Filer   *proc
	S3      *proc

	bin         string
	env         []string
	masterAddr  string
	filerAddr   string
	volumeArgs  [][]string
	filerArgs   []string
	s3Args      []string
	replication string
}

// SeaweedClusterReplication is the master's default replication: a second
// copy on another volume server of the same rack, so one volume server down
// loses no object.
const SeaweedClusterReplication = "001"

// StartSeaweedCluster starts the master, volumes volume servers, the filer
// and the S3 gateway with data under dir, every listener on 127.0.0.1 on a
// free port, and waits until S3 answers a signed ListBuckets.
func StartSeaweedCluster(ctx context.Context, bin, dir string, volumes int, accessKey, secretKey string) (*SeaweedCluster, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := chmodTree(dir); err != nil {
		return nil, err
	}
	if err := writeSeaweedSecurity(dir); err != nil {
		return nil, err
	}
	ports := make([]int, 6+2*volumes)
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	itoa := strconv.Itoa
	c := &SeaweedCluster{
		Endpoint:    Endpoint{URL: "http://127.0.0.1:" + itoa(ports[4]), AccessKey: accessKey, SecretKey: secretKey, Region: "us-east-1"},
		Dir:         dir,
		bin:         bin,
		env:         append(withoutWeedSettings(os.Environ()), "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey),
		masterAddr:  fmt.Sprintf("127.0.0.1:%d.%d", ports[0], ports[1]),
		filerAddr:   fmt.Sprintf("127.0.0.1:%d.%d", ports[2], ports[3]),
		replication: SeaweedClusterReplication,
	}
	common := []string{"-ip=127.0.0.1", "-ip.bind=127.0.0.1"}
	masterDir := filepath.Join(dir, "master")
	if err := os.MkdirAll(masterDir, 0o700); err != nil {
		return nil, err
	}
	masterArgs := append([]string{"master", "-mdir=" + masterDir, "-port=" + itoa(ports[0]), "-port.grpc=" + itoa(ports[1]),
		"-peers=none", "-telemetry=false", "-defaultReplication=" + c.replication,
		// As StartSeaweed's: 64 MiB volumes, so buckets (collections) do not
		// run out of volumes on a small disk.
		"-volumeSizeLimitMB=64"}, common...)
	for i := 0; i < volumes; i++ {
		vdir := filepath.Join(dir, "volume"+itoa(i+1))
		if err := os.MkdirAll(vdir, 0o700); err != nil {
			return nil, err
		}
		c.volumeArgs = append(c.volumeArgs, append([]string{"volume", "-dir=" + vdir, "-max=0", "-master=" + c.masterAddr,
			"-port=" + itoa(ports[6+2*i]), "-port.grpc=" + itoa(ports[7+2*i]), "-index=leveldb",
			// A volume server leaves the master's list this long before it
			// stops (10 s by default): one master, no traffic to drain.
			"-preStopSeconds=1"}, common...))
	}
	filerDir := filepath.Join(dir, "filer")
	if err := os.MkdirAll(filerDir, 0o700); err != nil {
		return nil, err
	}
	c.filerArgs = append([]string{"filer", "-master=" + c.masterAddr, "-defaultStoreDir=" + filerDir,
		"-port=" + itoa(ports[2]), "-port.grpc=" + itoa(ports[3]), "-disableHttp",
		"-localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-filer-%d.sock", ports[2]))}, common...)
	c.s3Args = append([]string{"s3", "-filer=" + c.filerAddr, "-port=" + itoa(ports[4]), "-port.grpc=" + itoa(ports[5]),
		"-port.iceberg=0", "-port.lance=0",
		"-localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-s3-%d.sock", ports[4]))}, common...)

	var err error
	if c.Master, err = c.start("master", masterArgs); err != nil {
		return nil, err
	}
	for i := range c.volumeArgs {
		if err := c.StartVolume(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.StartFiler(); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.StartS3(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// start runs one weed part, as StartSeaweed runs weed mini: umask 077, the
// folder's security.toml, its log in dir/NAME.log.
func (c *SeaweedCluster) start(name string, args []string) (*proc, error) {
	args = append([]string{"-c", `umask 077 && exec "$0" "$@"`, c.bin, "-config_dir=" + c.Dir}, args...)
	return startProc("weed "+name, filepath.Join(c.Dir, name+".log"), nil, c.env, "/bin/sh", args...)
}

// StartVolume (re)starts volume server i (from 0) on its folder and ports.
func (c *SeaweedCluster) StartVolume(i int) error {
	p, err := c.start("volume"+strconv.Itoa(i+1), c.volumeArgs[i])
	if err != nil {
		return err
	}
	if i < len(c.Volumes) {
		c.Volumes[i] = p
	} else {
		c.Volumes = append(c.Volumes, p)
	}
	return nil
}

// KillVolume kills volume server i (SIGKILL); StartVolume brings it back.
func (c *SeaweedCluster) KillVolume(i int) { c.Volumes[i].stop(syscall.SIGKILL, 10*time.Second) }

// StartFiler (re)starts the filer.
func (c *SeaweedCluster) StartFiler() error {
	p, err := c.start("filer", c.filerArgs)
	if err != nil {
		return err
	}
	c.Filer = p
	return nil
}

// StopFiler stops the filer (SIGTERM, as a restart would).
func (c *SeaweedCluster) StopFiler() { c.Filer.stop(syscall.SIGTERM, 15*time.Second) }

// KillFiler kills the filer (SIGKILL); StartFiler brings it back.
func (c *SeaweedCluster) KillFiler() { c.Filer.stop(syscall.SIGKILL, 10*time.Second) }

// StopS3 stops the S3 gateway: SIGTERM, or SIGKILL if crash.
func (c *SeaweedCluster) StopS3(crash bool) {
	if crash {
		c.S3.stop(syscall.SIGKILL, 10*time.Second)
	} else {
		c.S3.stop(syscall.SIGTERM, 15*time.Second)
	}
}

// StartS3 (re)starts the S3 gateway on its port and waits until it answers
// a signed ListBuckets.
func (c *SeaweedCluster) StartS3(ctx context.Context) error {
	p, err := c.start("s3", c.s3Args)
	if err != nil {
		return err
	}
	c.S3 = p
	if err := waitS3(ctx, c.Endpoint, p, 90*time.Second); err != nil {
		return fmt.Errorf("SeaweedFS S3 at %s not ready: %v\n%s", c.URL, err, p.logTail())
	}
	return nil
}

// NotRunning names the parts not running (exited, or killed and not
// started again): "master", "volume1".., "filer", "s3".
func (c *SeaweedCluster) NotRunning() []string {
	var out []string
	check := func(name string, p *proc) {
		if p == nil || p.hasExited() {
			out = append(out, name)
		}
	}
	check("master", c.Master)
	for i, v := range c.Volumes {
		check("volume"+strconv.Itoa(i+1), v)
	}
	check("filer", c.Filer)
	check("s3", c.S3)
	return out
}

// Stop ends every part, the S3 gateway first and the master last.
func (c *SeaweedCluster) Stop() {
	if c == nil {
		return
	}
	c.S3.stop(syscall.SIGTERM, 15*time.Second)
	c.Filer.stop(syscall.SIGTERM, 15*time.Second)
	stopAll(c.Volumes, func(v *proc) { v.stop(syscall.SIGTERM, 15*time.Second) })
	c.Master.stop(syscall.SIGTERM, 15*time.Second)
}
