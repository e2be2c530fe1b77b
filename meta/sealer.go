package meta

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Sealer encrypts access-key secrets at rest under the gateway's server key.
type Sealer struct{ aead cipher.AEAD }

const sealFormat = 1

// ParseServerKey accepts a 32-byte key written as 64 hex digits or as base64.
func ParseServerKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	return nil, errors.New("server key must be 32 bytes, written as 64 hex digits or base64 (generate one with `openssl rand -hex 32`)")
}

// NewServerKey makes a random server key, hex encoded.
func NewServerKey() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func NewSealer(key []byte) (*Sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal binds the secret to its access key id (as associated data), so a sealed
// secret copied onto another key's row does not open.
func (s *Sealer) Seal(accessKeyID, secret string) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	out := append([]byte{sealFormat}, nonce...)
	return s.aead.Seal(out, nonce, []byte(secret), []byte(accessKeyID))
}

func (s *Sealer) Open(accessKeyID string, sealed []byte) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealFormat {
		return "", fmt.Errorf("access key %s: sealed secret has an unknown format", accessKeyID)
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(accessKeyID))
	if err != nil {
		return "", fmt.Errorf("access key %s: secret does not open under this server key", accessKeyID)
	}
	return string(plain), nil
}
