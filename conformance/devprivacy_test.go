package conformance

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/stack"
)

// devRun is a running `fencegate dev run`.
type devRun struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
	env  map[string]string
}

func startDevRun(t *testing.T, bin, dir string) *devRun {
	t.Helper()
	_ = os.Remove(filepath.Join(dir, "env")) // waitEnvFile waits for this start's
	r := &devRun{cmd: exec.Command(bin, "dev", "run", "--dir", dir), out: &bytes.Buffer{}, done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	r.env = waitEnvFile(t, filepath.Join(dir, "env"), r.done, r.out)
	return r
}

func (r *devRun) stop(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("dev run did not stop within 60 s of SIGTERM:\n%s", r.out.String())
	}
}

// `make run`'s stack is its user's alone: PostgreSQL wants the password, the
// SeaweedFS APIs other than S3 want a token, and what is on disk is private, even
// after a restart of a folder whose modes were widened.
func TestDevRunIsPrivate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole stack twice")
	}
	bin := fencegateBinary(t)
	dir := sharedTempDir(t)
	run := startDevRun(t, bin, dir)
	env := run.env
	for _, name := range []string{"FENCEGATE_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
		"AWS_REGION", "FENCEGATE_ADMIN_ENDPOINT", "FENCEGATE_STORE_ENDPOINT", "DATABASE_URL", "FENCEGATE_SERVER_KEY"} {
		if env[name] == "" {
			t.Fatalf("the env file lacks %s", name)
		}
	}

	t.Run("postgres needs the password", func(t *testing.T) {
		good, _ := url.Parse(env["DATABASE_URL"])
		if _, ok := good.User.Password(); !ok {
			t.Fatal("DATABASE_URL carries no password")
		}
		noPassword, wrongPassword := *good, *good
		noPassword.User = url.User("postgres")
		wrongPassword.User = url.UserPassword("postgres", "wrong")
		for _, u := range []url.URL{noPassword, wrongPassword} {
			if err := pgLogin(u.String()); err == nil || !strings.Contains(err.Error(), "password") {
				t.Errorf("login as postgres with password %q: %v, want a password failure", passwordOf(u), err)
			}
		}
		// The unix socket, in the cluster's folder, asks for it too.
		sock := *good
		sock.Host, sock.User = "", url.User("postgres")
		sock.RawQuery = "sslmode=disable&host=" + url.QueryEscape(filepath.Join(dir, "postgres")) + "&port=" + good.Port()
		if err := pgLogin(sock.String()); err == nil {
			t.Error("login over the unix socket without a password succeeded")
		}
		if err := pgLogin(good.String()); err != nil {
			t.Errorf("login with DATABASE_URL: %v", err)
		}
	})

	t.Run("seaweedfs wants a token", func(t *testing.T) {
		checkSeaweedRefuses(t, dir, env)
	})

	t.Run("keys create with only the env file", func(t *testing.T) {
		checkKeysCreateFromEnvFile(t, bin, dir, env)
	})

	checkPrivateModes(t, dir)
	if os.Geteuid() == 0 {
		t.Run("another user cannot read", func(t *testing.T) { checkNobodyLockedOut(t, dir) })
	}

	// Widen everything, restart: the start puts the modes back.
	run.stop(t)
	for _, p := range privatePaths(dir) {
		mode := os.FileMode(0o644)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	run = startDevRun(t, bin, dir)
	checkPrivateModes(t, dir)
	ep := stack.Endpoint{URL: run.env["FENCEGATE_ENDPOINT"], AccessKey: run.env["AWS_ACCESS_KEY_ID"], SecretKey: run.env["AWS_SECRET_ACCESS_KEY"], Region: "us-east-1"}
	if _, err := ep.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("ListBuckets after the restart: %v", err)
	}
	run.stop(t)
}

func pgLogin(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err == nil {
		c.Close(ctx)
	}
	return err
}

func passwordOf(u url.URL) string {
	p, _ := u.User.Password()
	return p
}

// privatePaths are the folders that must be 0700 and the files that must be 0600.
func privatePaths(dir string) []string {
	return []string{dir, filepath.Join(dir, "postgres"), filepath.Join(dir, "seaweedfs"),
		filepath.Join(dir, "state.json"), filepath.Join(dir, "env"), stack.PostgresPasswordFile(filepath.Join(dir, "postgres")),
		stack.SeaweedSecurityFile(filepath.Join(dir, "seaweedfs")), filepath.Join(dir, "seaweedfs", "weed.log"),
		filepath.Join(dir, "postgres", "server.log"), filepath.Join(dir, "postgres", "pg_hba.conf")}
}

func checkPrivateModes(t *testing.T, dir string) {
	t.Helper()
	for _, p := range privatePaths(dir) {
		st, err := os.Stat(p)
		if err != nil {
			t.Error(err)
			continue
		}
		want := os.FileMode(0o600)
		if st.IsDir() {
			want = 0o700
			// As root, the top folder lets PostgreSQL's user (by group) pass
			// through to its cluster folder, and lets nobody else in.
			if p == dir && os.Geteuid() == 0 {
				want = 0o710
			}
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, st.Mode().Perm(), want)
		}
	}
	// Whatever SeaweedFS keeps is in folders only its user can enter (weed
	// itself chmods a few files, its .vif, to 0644).
	_ = filepath.Walk(filepath.Join(dir, "seaweedfs"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() && info.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", p, info.Mode().Perm())
		}
		return nil
	})
}

// hs256 mints a JWT as SeaweedFS's parts do for one another, for the positive
// control: the request refused without a token is accepted with one.
func hs256(key string, claims map[string]any) string {
	claims["exp"] = time.Now().Add(time.Minute).Unix()
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body, _ := json.Marshal(claims)
	signing := head + "." + enc.EncodeToString(body)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

func httpDo(t *testing.T, method, u, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// refused: 401 or 403 from an API that checks tokens, 404 from one that is not
// served at all (-disableHttp: no handler for any path, even an existing object's).
func refused(code int) bool {
	return code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound
}

func checkSeaweedRefuses(t *testing.T, dir string, env map[string]string) {
	var st struct {
		Ports stack.SeaweedPorts `json:"seaweed_ports"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	swDir := filepath.Join(dir, "seaweedfs")
	keys, err := stack.SeaweedSigningKeys(swDir)
	if err != nil {
		t.Fatal(err)
	}
	filer := fmt.Sprintf("http://127.0.0.1:%d", st.Ports.Filer)
	volume := fmt.Sprintf("http://127.0.0.1:%d", st.Ports.Volume)
	master := fmt.Sprintf("http://127.0.0.1:%d", st.Ports.Master)

	// An object written through the gateway, with the env file's key: S3 with
	// keys works.
	ep := stack.Endpoint{URL: env["FENCEGATE_ENDPOINT"], AccessKey: env["AWS_ACCESS_KEY_ID"], SecretKey: env["AWS_SECRET_ACCESS_KEY"], Region: "us-east-1"}
	c := ep.S3Client()
	ctx := context.Background()
	bucket, key, content := "privacy", "secret.txt", []byte("not for other users")
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(content)}); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("S3 GET with the keys: %v", err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if !bytes.Equal(got, content) {
		t.Fatalf("S3 GET: %q, want %q", got, content)
	}

	// The filer's and the master's HTTP APIs, for that very object.
	path := filer + "/buckets/" + bucket + "/" + key
	for _, r := range []struct{ method, url string }{
		{"GET", filer + "/"}, {"GET", filer + "/buckets/"}, {"GET", path}, {"GET", path + "?metadata=true"},
		{"PUT", filer + "/buckets/" + bucket + "/planted.txt"}, {"DELETE", path},
		{"GET", master + "/dir/assign"}, {"GET", master + "/dir/lookup?volumeId=1"}, {"POST", master + "/submit"},
		{"POST", master + "/col/delete?collection=" + bucket},
	} {
		if code, body := httpDo(t, r.method, r.url, "", []byte("planted")); !refused(code) {
			t.Errorf("%s %s without a token: %d %q, want 401, 403 or 404", r.method, r.url, code, body)
		}
	}
	// With a filer token, still nothing: the API is off, not just guarded.
	if code, _ := httpDo(t, "GET", path, hs256(keys["jwt.filer_signing.read"], map[string]any{}), nil); code != http.StatusNotFound {
		t.Errorf("filer GET with a read token: %d, want 404 (filer HTTP off)", code)
	}

	// The object's needle on the volume server: without a token refused, with
	// one (the positive control) served.
	fid := needleOf(t, swDir, bucket, content)
	if code, body := httpDo(t, "GET", volume+"/"+fid, "", nil); code != http.StatusUnauthorized {
		t.Errorf("volume GET %s without a token: %d %q, want 401", fid, code, body)
	}
	if code, body := httpDo(t, "GET", volume+"/"+fid, hs256(keys["jwt.signing.read"], map[string]any{"fid": fid}), nil); code != http.StatusOK || !bytes.Contains(body, content) {
		t.Errorf("volume GET %s with a read token: %d %q", fid, code, body)
	}
	for _, method := range []string{"PUT", "POST", "DELETE"} {
		if code, body := httpDo(t, method, volume+"/"+fid, "", []byte("overwritten")); code != http.StatusUnauthorized {
			t.Errorf("volume %s %s without a token: %d %q, want 401", method, fid, code, body)
		}
	}
	if obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Errorf("S3 GET after the refused requests: %v", err)
	} else {
		got, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		if !bytes.Equal(got, content) {
			t.Errorf("S3 GET after the refused requests: %q, want %q", got, content)
		}
	}
}

// needleOf finds the file id ("vid,keycookie") of the needle holding content in
// bucket's volumes, from the volume files themselves: an .idx entry is key (8
// bytes), offset (4, in 8-byte units) and size (4); the needle in the .dat
// starts with cookie (4) and key (8).
func needleOf(t *testing.T, swDir, bucket string, content []byte) string {
	t.Helper()
	idxs, _ := filepath.Glob(filepath.Join(swDir, bucket+"_*.idx"))
	for _, idxPath := range idxs {
		vid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(idxPath), bucket+"_"), ".idx")
		idx, err1 := os.ReadFile(idxPath)
		dat, err2 := os.ReadFile(strings.TrimSuffix(idxPath, ".idx") + ".dat")
		if err1 != nil || err2 != nil {
			continue
		}
		for e := 0; e+16 <= len(idx); e += 16 {
			off := int(binary.BigEndian.Uint32(idx[e+8:])) * 8
			size := int(binary.BigEndian.Uint32(idx[e+12:]))
			if off == 0 || off+16+size > len(dat) || !bytes.Contains(dat[off:off+16+size], content) {
				continue
			}
			cookie := binary.BigEndian.Uint32(dat[off:])
			key := binary.BigEndian.Uint64(dat[off+4:])
			return fmt.Sprintf("%s,%x%08x", vid, key, cookie)
		}
	}
	t.Fatalf("no needle holding %q in %s", content, swDir)
	return ""
}

func checkKeysCreateFromEnvFile(t *testing.T, bin, dir string, env map[string]string) {
	// Nothing from this test run's environment (dev exec's DATABASE_URL): the
	// env file alone.
	cmd := exec.Command("/bin/sh", "-c", `. "$1" && exec "$2" keys create --description devprivacy 'read:*'`, "sh",
		filepath.Join(dir, "env"), bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("keys create with the env file sourced: %v\n%s", err, out)
	}
	created := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			created[k] = v
		}
	}
	ep := stack.Endpoint{URL: env["FENCEGATE_ENDPOINT"], AccessKey: created["AWS_ACCESS_KEY_ID"], SecretKey: created["AWS_SECRET_ACCESS_KEY"], Region: "us-east-1"}
	if ep.AccessKey == "" || ep.SecretKey == "" {
		t.Fatalf("keys create printed no key pair:\n%s", out)
	}
	// The gateway picks the new key up (an unknown key triggers a refresh).
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := ep.S3Client().ListBuckets(context.Background(), &s3.ListBucketsInput{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListBuckets with the created key: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkNobodyLockedOut: another user of the machine can read none of it.
func checkNobodyLockedOut(t *testing.T, dir string) {
	for _, args := range [][]string{
		{"ls", filepath.Join(dir, "seaweedfs")},
		{"cat", filepath.Join(dir, "state.json")},
		{"cat", filepath.Join(dir, "env")},
		{"cat", stack.SeaweedSecurityFile(filepath.Join(dir, "seaweedfs"))},
		{"ls", filepath.Join(dir, "postgres")},
	} {
		cmd := exec.Command("setpriv", append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("user nobody ran %v: %s", args, out)
		} else if !strings.Contains(string(out), "Permission denied") {
			t.Errorf("user nobody ran %v: %v %s, want Permission denied", args, err, out)
		}
	}
}
