package gateway

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxKeyLength is S3's limit on an object key, in bytes of UTF-8.
const maxKeyLength = 1024

var (
	errNoKey = newAPIError("UserKeyMustBeSpecified", http.StatusBadRequest,
		"The request requires a key name, and none was given.")
	errKeyTooLong  = newAPIError("KeyTooLongError", http.StatusBadRequest, "Your key is too long.")
	errKeyNotUTF8  = newAPIError("InvalidArgument", http.StatusBadRequest, "Object keys must be valid UTF-8.")
	errFoldedKey   = newAPIError("InvalidArgument", http.StatusBadRequest, "Object keys with an empty, '.' or '..' path segment (a leading '/', '//', '/./', '/../') are refused: the store folds them into another key.")
	errBackslashIn = newAPIError("InvalidArgument", http.StatusBadRequest, "Object keys containing '\\' are refused: the store folds '\\' into '/', so the key would name another object.")
	errNULInKey    = newAPIError("InvalidArgument", http.StatusBadRequest, "Object keys containing a NUL byte are refused: neither the catalog nor the store can hold them.")
)

// checkKey applies S3's key rules, and refuses the spellings the store would
// fold into another key: a lease and a catalog row are per key, so two
// spellings of one stored object must never be two keys to fencegate
// (docs/SECURITY.md). Filer-backed stores such as SeaweedFS
// resolve the key as a file path: empty, '.' and '..' segments collapse, and
// '\' may be read as '/'. Whether the store folds '\' is learnt by the
// start-up probe; until it has proven that it does not, such keys are refused.
func (s *Server) checkKey(key string) *apiError {
	switch {
	case key == "":
		return errNoKey
	case len(key) > maxKeyLength:
		return errKeyTooLong
	case !utf8.ValidString(key):
		return errKeyNotUTF8
	case strings.IndexByte(key, 0) >= 0:
		// PostgreSQL's text cannot hold it (the lease and the catalog would
		// fail with a 500), and stores refuse it.
		return errNULInKey
	case foldsAsPath(key):
		return errFoldedKey
	case strings.ContainsRune(key, '\\') && !s.keepsBackslash.Load():
		return errBackslashIn
	}
	return nil
}

// foldsAsPath reports a key with an empty, "." or ".." segment before its
// last '/' or as its last segment. A trailing '/' (a folder marker) is an
// ordinary S3 key and stays allowed.
func foldsAsPath(key string) bool {
	rest := key
	for {
		seg, more, found := strings.Cut(rest, "/")
		if seg == "." || seg == ".." || seg == "" && found {
			return true
		}
		if !found || more == "" {
			return false
		}
		rest = more
	}
}
