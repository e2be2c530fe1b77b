package stack

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A stack's data is private to the user who started it: folders 0700 and files
// 0600, whatever umask or an earlier version left. Modes are set explicitly on
// every write and at every start, because os.WriteFile and os.Mkdir apply their
// mode only when they create.

// MakePrivateDir creates dir if needed and makes it 0700, the starting user's
// alone. As root, PostgreSQL runs as another user (serverCredential) who must
// pass through dir to reach its cluster folder: dir then belongs to that user's
// group with mode 0710 (enter, never list), so still no other user gets in.
func MakePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cred, err := postgresUser()
	if err != nil {
		return err
	}
	if cred == nil {
		return os.Chmod(dir, 0o700)
	}
	if err := os.Chown(dir, os.Geteuid(), int(cred.Gid)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o710)
}

// WritePrivateFile replaces path with data, mode 0600. The bytes go to a new file
// renamed over the old one, so a reader never sees half a file and an old
// file's wider mode does not survive.
func WritePrivateFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadOrCreateSecret reads the secret kept in path, or generates one (32 random
// bytes, hex) and keeps it there. created says it is new. An existing file is
// set back to 0600 in case it was widened.
func loadOrCreateSecret(path string) (secret string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, false, os.Chmod(path, 0o600)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	secret = randomHex(32)
	if err := WritePrivateFile(path, []byte(secret+"\n")); err != nil {
		return "", false, fmt.Errorf("keep a new secret in %s: %w", path, err)
	}
	return secret, true, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// chmodTree sets every folder under root to 0700 and every file to 0600, for data
// an earlier version wrote with wider modes (SeaweedFS's 0644 files).
func chmodTree(root string) error {
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			if info.Mode().Perm() != 0o700 {
				return os.Chmod(p, 0o700)
			}
		case info.Mode().IsRegular():
			if info.Mode().Perm()&0o077 != 0 {
				return os.Chmod(p, info.Mode().Perm()&0o700)
			}
		}
		return nil
	})
}
