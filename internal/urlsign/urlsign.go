// Package urlsign mints and verifies the native signed-URL tokens of the
// protocol (§5.4): st = base64url(payloadJson) + "." +
// base64url(HMAC-SHA256(key, payloadJson)).
//
// A segment token carries the claims {"v":1,"seg","sd","aud","exp"} of the
// spec; a blob download token {"v":1,"blob","aud","exp"} (§5.9.5); a blob
// upload grant {"v":1,"put","len","aud","exp"} (§5.9.3: the spec leaves
// the native upload grant to the host). exp is unix seconds. aud is an
// opaque per-partition audience: a keyed derivation of the partition that
// clients cannot invert. The verifier accepts the current key, and the
// previous one until its grace period ends (key rotation).
package urlsign

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxTokenBytes bounds a token; a longer one is refused before decoding.
const MaxTokenBytes = 2048

// SkewSeconds is the clock-skew allowance of exp checks (§5.4: at most
// 60 s).
const SkewSeconds = 60

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 16

// Keys are the signing keys. The zero value signs nothing.
type Keys struct {
	// Current signs every new token and verifies.
	Current []byte
	// Previous verifies until PreviousUntilMs (Unix milliseconds): the
	// grace period of a rotation, at least the longest TTL issued with it.
	Previous        []byte
	PreviousUntilMs int64
}

// Validate checks the key lengths.
func (k Keys) Validate() error {
	if len(k.Current) < MinKeyBytes {
		return fmt.Errorf("urlsign: the signing key must have at least %d bytes, it has %d", MinKeyBytes, len(k.Current))
	}
	if k.Previous != nil && len(k.Previous) < MinKeyBytes {
		return fmt.Errorf("urlsign: the previous signing key must have at least %d bytes, it has %d", MinKeyBytes, len(k.Previous))
	}
	return nil
}

// Claims are a token's claims; which fields are set depends on its kind.
type Claims struct {
	V    int    `json:"v"`
	Seg  string `json:"seg,omitempty"`
	SD   string `json:"sd,omitempty"`
	Blob string `json:"blob,omitempty"`
	Put  string `json:"put,omitempty"`
	Len  *int64 `json:"len,omitempty"`
	Aud  string `json:"aud"`
	Exp  int64  `json:"exp"`
}

// Kind is what a token grants.
type Kind int

// The kinds of token.
const (
	KindSegment Kind = iota + 1
	KindBlob
	KindUpload
)

// Kind returns the kind of the claims, or 0 when they fit none.
func (c Claims) Kind() Kind {
	switch {
	case c.Seg != "" && c.Blob == "" && c.Put == "" && c.Len == nil:
		return KindSegment
	case c.Blob != "" && c.Seg == "" && c.SD == "" && c.Put == "" && c.Len == nil:
		return KindBlob
	case c.Put != "" && c.Len != nil && c.Seg == "" && c.SD == "" && c.Blob == "":
		return KindUpload
	}
	return 0
}

// Audience derives the opaque audience of a partition under key.
func Audience(key []byte, partition string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("syncgo/aud\x00"))
	m.Write([]byte(partition))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// payload is the claims JSON in the spec's key order (encoding/json keeps
// the struct's field order), without HTML escaping.
func payload(c Claims) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func mac(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// Sign returns the token of claims under the current key. The caller sets
// Aud (Audience with k.Current) and Exp.
func (k Keys) Sign(c Claims) (string, error) {
	if len(k.Current) == 0 {
		return "", errors.New("urlsign: no signing key")
	}
	c.V = 1
	p, err := payload(c)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(p) + "." + base64.RawURLEncoding.EncodeToString(mac(k.Current, p)), nil
}

// Errors of Verify.
var (
	// ErrMalformed: not a token, or a token no key of this host signed
	// (a tampered one).
	ErrMalformed = errors.New("urlsign: the token is malformed or its signature does not verify")
	// ErrExpired: a genuine token past its exp (and the skew allowance).
	ErrExpired = errors.New("urlsign: the token has expired")
)

// Verify checks a token's MAC under the accepted keys and its expiry at
// nowMs, and returns its claims and the key that verified it (audiences
// are derived with that key). A token that does not parse, whose MAC no
// accepted key verifies, or whose claims are not one of the three kinds is
// ErrMalformed; a genuine one past exp + SkewSeconds is ErrExpired.
func (k Keys) Verify(token string, nowMs int64) (Claims, []byte, error) {
	var c Claims
	if len(token) == 0 || len(token) > MaxTokenBytes || len(k.Current) == 0 {
		return c, nil, ErrMalformed
	}
	p64, m64, ok := strings.Cut(token, ".")
	if !ok {
		return c, nil, ErrMalformed
	}
	p, err := decode64(p64)
	if err != nil {
		return c, nil, ErrMalformed
	}
	got, err := decode64(m64)
	if err != nil || len(got) != sha256.Size {
		return c, nil, ErrMalformed
	}
	var key []byte
	switch {
	case hmac.Equal(got, mac(k.Current, p)):
		key = k.Current
	case len(k.Previous) > 0 && nowMs < k.PreviousUntilMs && hmac.Equal(got, mac(k.Previous, p)):
		key = k.Previous
	}
	if key == nil {
		return c, nil, ErrMalformed
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() || c.V != 1 || c.Aud == "" || c.Kind() == 0 {
		return Claims{}, nil, ErrMalformed
	}
	if c.Exp < nowMs/1000-SkewSeconds {
		return c, key, ErrExpired
	}
	return c, key, nil
}

// sealKey derives the partition-sealing key from a signing key.
func sealKey(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("syncgo/seal-partition"))
	return m.Sum(nil)
}

// SealPartition returns an audience that names partition to this host
// alone: the partition encrypted (AES-256-GCM) under a key derived from
// key, with a nonce derived from the partition, so the value is opaque to
// clients, stable per partition, and OpenPartition recovers the
// partition. Blob tokens carry it: a blob download or upload must find
// its partition from the token alone.
func SealPartition(key []byte, partition string) string {
	k := sealKey(key)
	m := hmac.New(sha256.New, k)
	m.Write([]byte(partition))
	nonce := m.Sum(nil)[:12]
	aead := newGCM(k)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(append([]byte(nil), nonce...), nonce, []byte(partition), nil))
}

// OpenPartition returns the partition a SealPartition audience under key
// names; false when it is not one.
func OpenPartition(key []byte, aud string) (string, bool) {
	b, err := decode64(aud)
	if err != nil || len(b) < 12+16 || len(b) > MaxTokenBytes {
		return "", false
	}
	k := sealKey(key)
	p, err := newGCM(k).Open(nil, b[:12], b[12:], nil)
	if err != nil {
		return "", false
	}
	m := hmac.New(sha256.New, k)
	m.Write(p)
	if !hmac.Equal(m.Sum(nil)[:12], b[:12]) {
		return "", false
	}
	return string(p), true
}

func newGCM(key []byte) cipher.AEAD {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key never fails
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// decode64 decodes unpadded base64url strictly: one spelling per value.
// The decoder skips CR and LF even in strict mode, which would let one
// token be written many ways; they are refused first.
func decode64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("urlsign: a line break in base64url")
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}
