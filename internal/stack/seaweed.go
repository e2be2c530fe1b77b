package stack

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// StartSeaweed starts SeaweedFS with data in dir and the given root credentials,
// every listener on 127.0.0.1, and waits until its S3 API answers a signed
// ListBuckets. Other local users get no further than that API's credentials:
// the volume and filer HTTP APIs want a JWT signed with keys kept in
// dir/security.toml, every gRPC port a client certificate of dir's own CA, dir
// is 0700 and what weed creates is its user's (umask 077). With
// SeaweedHTTPClosed the master's and the filer's HTTP APIs are off as well.
func StartSeaweed(ctx context.Context, bin, dir string, ports SeaweedPorts, accessKey, secretKey string, opts ...SeaweedOption) (*Seaweed, error) {
	var cfg seaweedConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := ports.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Data an older version wrote 0644 in 0755 folders becomes private too.
	if err := chmodTree(dir); err != nil {
		return nil, err
	}
	if err := writeSeaweedSecurity(dir); err != nil {
		return nil, err
	}
	itoa := strconv.Itoa
	// -config_dir is where weed looks for security.toml first.
	args := []string{"-config_dir=" + dir, "mini", "-dir=" + dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-webdav=false", "-admin.ui=false", "-master.telemetry=false",
		// Every bucket is a collection with volumes of its own, and weed mini
		// sizes volumes at 1 GiB and allows free disk / volume size of them:
		// about 70 buckets on a machine with 70 GB free, after which every
		// write to a new bucket fails with "failed to find writable volumes".
		// 64 MiB volumes allow 16 times as many buckets (a bucket's data
		// spreads over more volumes as it grows).
		"-master.volumeSizeLimitMB=64",
		"-s3.port=" + itoa(ports.S3), "-s3.port.grpc=" + itoa(ports.S3GRPC),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-master.port=" + itoa(ports.Master), "-master.port.grpc=" + itoa(ports.MasterGRPC),
		"-filer.port=" + itoa(ports.Filer), "-filer.port.grpc=" + itoa(ports.FilerGRPC),
		"-volume.port=" + itoa(ports.Volume), "-volume.port.grpc=" + itoa(ports.VolumeGRPC),
		"-admin.port=" + itoa(ports.Admin), "-admin.port.grpc=" + itoa(ports.AdminGRPC), "-admin.port.legacy=0",
		"-s3.localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-s3-%d.sock", ports.S3)),
		"-filer.localSocket=" + filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-weed-filer-%d.sock", ports.Filer)),
	}
	if cfg.httpClosed {
		args = append(args, "-disableHttp")
	}
	env := append(withoutWeedSettings(os.Environ()), "AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey)
	// weed creates its files and its unix sockets (in /tmp) with the umask it
	// inherits; 077 keeps them its user's, whatever this process's umask is.
	// exec keeps the process id, the process group and the parent-death signal.
	args = append([]string{"-c", `umask 077 && exec "$0" "$@"`, bin}, args...)
	p, err := startProc("weed", filepath.Join(dir, "weed.log"), nil, env, "/bin/sh", args...)
	if err != nil {
		return nil, err
	}
	s := &Seaweed{
		Endpoint: Endpoint{URL: fmt.Sprintf("http://127.0.0.1:%d", ports.S3), AccessKey: accessKey, SecretKey: secretKey, Region: "us-east-1"},
		Dir:      dir, Ports: ports, proc: p,
	}
	if err := waitS3(ctx, s.Endpoint, p, 90*time.Second); err != nil {
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

// Crash kills SeaweedFS at once (SIGKILL); StartSeaweed with the same folder
// and ports starts it again on its data.
func (s *Seaweed) Crash() {
	if s != nil {
		s.proc.stop(syscall.SIGKILL, 10*time.Second)
	}
}

// Pid is weed's process id.
func (s *Seaweed) Pid() int { return s.proc.Pid() }

// SeaweedOption changes how StartSeaweed runs SeaweedFS.
type SeaweedOption func(*seaweedConfig)

type seaweedConfig struct{ httpClosed bool }

// SeaweedHTTPClosed turns the master's and the filer's HTTP APIs off
// (-disableHttp): weed's parts use gRPC among themselves, and its S3 API writes
// and reads object data on the volume server's HTTP API, which stays, behind
// its tokens. The master's HTTP API checks no token at all (/dir/assign hands
// out write tokens, /dir/lookup read tokens, /col/delete drops a bucket's
// volumes). It is not the default because the benchmark asks the master for
// vacuums over it.
func SeaweedHTTPClosed() SeaweedOption {
	return func(c *seaweedConfig) { c.httpClosed = true }
}

// SeaweedSecurityFile is the security.toml of the SeaweedFS whose data is in dir.
func SeaweedSecurityFile(dir string) string { return filepath.Join(dir, "security.toml") }

// seaweedJWTSections are security.toml's signing keys: master-issued tokens for
// volume writes and reads, and tokens for filer HTTP writes and reads. With all
// four set, no HTTP request other than S3's reaches data without a token
// signed with them; weed's own parts mint those tokens from this file.
var seaweedJWTSections = []string{"jwt.signing", "jwt.signing.read", "jwt.filer_signing", "jwt.filer_signing.read"}

// writeSeaweedSecurity (re)writes dir's security.toml, 0600, keeping the keys
// of an existing one: they are generated once per data folder.
func writeSeaweedSecurity(dir string) error {
	path := SeaweedSecurityFile(dir)
	keys, err := SeaweedSigningKeys(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var b strings.Builder
	b.WriteString("# Written by fencegate at every start. Signing keys of SeaweedFS's JWTs: its\n" +
		"# volume and filer HTTP APIs refuse requests without a token.\n")
	for _, sec := range seaweedJWTSections {
		if keys[sec] == "" {
			keys[sec] = randomHex(32)
		}
		fmt.Fprintf(&b, "\n[%s]\nkey = \"%s\"\nexpires_after_seconds = 10\n", sec, keys[sec])
	}
	b.WriteString("\n# The volume server's status pages stay closed too.\n[access]\nui = false\n")
	// gRPC (filer metadata, volume assignment, ...) knows no tokens: every gRPC
	// listener wants a client certificate from this folder's own CA.
	tlsFiles, err := ensureSeaweedTLS(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n[grpc]\nca = %q\n", tlsFiles.ca)
	for _, component := range []string{"master", "volume", "filer", "s3", "admin", "worker", "msg_broker", "msg_agent", "mq", "client"} {
		fmt.Fprintf(&b, "\n[grpc.%s]\ncert = %q\nkey = %q\n", component, tlsFiles.cert, tlsFiles.key)
	}
	return WritePrivateFile(path, []byte(b.String()))
}

type seaweedTLSFiles struct{ ca, cert, key string }

// ensureSeaweedTLS makes, once per data folder, a CA and one certificate signed
// by it for every part of weed, server and client alike (weed checks the CA,
// not host names). The CA's own key is not kept: nothing else is ever signed.
func ensureSeaweedTLS(dir string) (seaweedTLSFiles, error) {
	tlsDir := filepath.Join(dir, "tls")
	files := seaweedTLSFiles{ca: filepath.Join(tlsDir, "ca.pem"), cert: filepath.Join(tlsDir, "weed.pem"), key: filepath.Join(tlsDir, "weed.key")}
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return files, err
	}
	if err := os.Chmod(tlsDir, 0o700); err != nil {
		return files, err
	}
	complete := true
	for _, f := range []string{files.ca, files.cert, files.key} {
		if _, err := os.Stat(f); err != nil {
			complete = false
		}
	}
	if complete {
		return files, nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencegate SeaweedFS CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(20, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return files, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fencegate-weed"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(20, 0, 0),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		return files, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return files, err
	}
	for path, block := range map[string]*pem.Block{
		files.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		files.cert: {Type: "CERTIFICATE", Bytes: der},
		files.key:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := WritePrivateFile(path, pem.EncodeToMemory(block)); err != nil {
			return files, err
		}
	}
	return files, nil
}

// SeaweedSigningKeys reads the JWT signing keys of the SeaweedFS in dir, by
// section ("jwt.filer_signing.read", ...), from the file writeSeaweedSecurity
// wrote. Tests use them to mint the tokens an unauthenticated request lacks.
func SeaweedSigningKeys(dir string) (map[string]string, error) {
	keys := map[string]string{}
	b, err := os.ReadFile(SeaweedSecurityFile(dir))
	if err != nil {
		return keys, err
	}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.Trim(line, "[]")
		} else if v, ok := strings.CutPrefix(line, "key = "); ok {
			keys[section] = strings.Trim(v, `"`)
		}
	}
	return keys, nil
}

// withoutWeedSettings drops WEED_* variables, which weed reads as settings and
// which would win over security.toml (an empty WEED_JWT_SIGNING_KEY would turn
// the tokens off).
func withoutWeedSettings(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "WEED_") {
			out = append(out, kv)
		}
	}
	return out
}
