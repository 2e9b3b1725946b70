package urlsign

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

var (
	keyA = bytes.Repeat([]byte{0xa1}, 32)
	keyB = bytes.Repeat([]byte{0xb2}, 32)
)

const nowMs = int64(1_750_000_000_000)

func segClaims(key []byte, exp int64) Claims {
	return Claims{Seg: "sha256:" + strings.Repeat("ab", 32), SD: "sha256:" + strings.Repeat("cd", 32),
		Aud: Audience(key, "part-1"), Exp: exp}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	k := Keys{Current: keyA}
	c := segClaims(keyA, nowMs/1000+900)
	tok, err := k.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	// The payload is the spec's JSON, keys in its order.
	p64, m64, _ := strings.Cut(tok, ".")
	p, _ := base64.RawURLEncoding.DecodeString(p64)
	want := `{"v":1,"seg":"` + c.Seg + `","sd":"` + c.SD + `","aud":"` + c.Aud + `","exp":` + "1750000900" + `}`
	if string(p) != want {
		t.Fatalf("payload %s\nwant    %s", p, want)
	}
	m := hmac.New(sha256.New, keyA)
	m.Write(p)
	if m64 != base64.RawURLEncoding.EncodeToString(m.Sum(nil)) {
		t.Fatal("the MAC is not HMAC-SHA256(key, payloadJson)")
	}
	got, key, err := k.Verify(tok, nowMs)
	if err != nil || got.Kind() != KindSegment || got.Seg != c.Seg || got.SD != c.SD || got.Aud != c.Aud || got.Exp != c.Exp || !bytes.Equal(key, keyA) {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
}

func TestVerifyRefusals(t *testing.T) {
	k := Keys{Current: keyA}
	tok, _ := k.Sign(segClaims(keyA, nowMs/1000+900))
	p64, m64, _ := strings.Cut(tok, ".")
	p, _ := base64.RawURLEncoding.DecodeString(p64)
	edited := base64.RawURLEncoding.EncodeToString(bytes.Replace(p, []byte(`"sd":"sha256:cd`), []byte(`"sd":"sha256:ce`), 1))
	flip := []byte(m64)
	flip[3] ^= 1
	for name, bad := range map[string]string{
		"empty":          "",
		"no dot":         p64 + m64,
		"edited payload": edited + "." + m64,
		"edited mac":     p64 + "." + string(flip),
		"short mac":      p64 + "." + m64[:20],
		"padded":         p64 + "=." + m64,
		"overlong":       strings.Repeat("a", MaxTokenBytes+1),
		"other key": func() string {
			t, _ := Keys{Current: keyB}.Sign(segClaims(keyB, nowMs/1000+900))
			return t
		}(),
	} {
		if _, _, err := k.Verify(bad, nowMs); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Verify = %v; want ErrMalformed", name, err)
		}
	}
	// Claims that fit no kind, or carry unknown fields, signed with the key.
	for name, payload := range map[string]string{
		"two kinds":     `{"v":1,"seg":"s","blob":"b","aud":"a","exp":1}`,
		"unknown field": `{"v":1,"seg":"s","sd":"d","aud":"a","exp":1,"x":2}`,
		"version 2":     `{"v":2,"seg":"s","sd":"d","aud":"a","exp":1}`,
		"no audience":   `{"v":1,"seg":"s","sd":"d","exp":1}`,
		"trailing":      `{"v":1,"seg":"s","sd":"d","aud":"a","exp":1}{}`,
		"not json":      `v=1`,
	} {
		m := hmac.New(sha256.New, keyA)
		m.Write([]byte(payload))
		tok := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
		if _, _, err := k.Verify(tok, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Verify = %v; want ErrMalformed", name, err)
		}
	}
}

func TestVerifyExpiry(t *testing.T) {
	k := Keys{Current: keyA}
	exp := nowMs / 1000
	tok, _ := k.Sign(segClaims(keyA, exp))
	if _, _, err := k.Verify(tok, nowMs+SkewSeconds*1000); err != nil {
		t.Fatalf("within the skew allowance: %v", err)
	}
	if _, _, err := k.Verify(tok, nowMs+(SkewSeconds+1)*1000); !errors.Is(err, ErrExpired) {
		t.Fatalf("past exp and the skew: %v; want ErrExpired", err)
	}
}

func TestRotation(t *testing.T) {
	old := Keys{Current: keyA}
	tok, _ := old.Sign(segClaims(keyA, nowMs/1000+900))
	rotated := Keys{Current: keyB, Previous: keyA, PreviousUntilMs: nowMs + 1000}
	_, key, err := rotated.Verify(tok, nowMs)
	if err != nil || !bytes.Equal(key, keyA) {
		t.Fatalf("a token of the previous key in its grace period: %v", err)
	}
	if _, _, err := rotated.Verify(tok, nowMs+1000); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a token of the previous key after its grace period: %v; want ErrMalformed", err)
	}
	if _, _, err := (Keys{Current: keyB}).Verify(tok, nowMs); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a token of a retired key: %v; want ErrMalformed", err)
	}
	fresh, _ := rotated.Sign(segClaims(keyB, nowMs/1000+900))
	if _, key, err := rotated.Verify(fresh, nowMs); err != nil || !bytes.Equal(key, keyB) {
		t.Fatalf("a token of the new key: %v", err)
	}
	if Audience(keyA, "p") == Audience(keyB, "p") || Audience(keyA, "p") == Audience(keyA, "q") {
		t.Fatal("audiences do not depend on the key and the partition")
	}
}

func TestKinds(t *testing.T) {
	n := int64(5)
	for _, c := range []struct {
		c    Claims
		kind Kind
	}{
		{Claims{Seg: "s", SD: "d"}, KindSegment},
		{Claims{Blob: "b"}, KindBlob},
		{Claims{Put: "b", Len: &n}, KindUpload},
		{Claims{Put: "b"}, 0},
		{Claims{Blob: "b", Len: &n}, 0},
		{Claims{Blob: "b", SD: "d"}, 0},
		{Claims{}, 0},
	} {
		if got := c.c.Kind(); got != c.kind {
			t.Errorf("Kind(%+v) = %d, want %d", c.c, got, c.kind)
		}
	}
}

func FuzzVerify(f *testing.F) {
	k := Keys{Current: keyA, Previous: keyB, PreviousUntilMs: nowMs + 1}
	tok, _ := k.Sign(segClaims(keyA, nowMs/1000+900))
	f.Add(tok)
	f.Add("a.b")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, key, err := k.Verify(s, nowMs)
		if err == nil && (c.Kind() == 0 || key == nil) {
			t.Fatalf("accepted %q with claims %+v", s, c)
		}
		if err == nil || errors.Is(err, ErrExpired) {
			// Whatever verifies must be what a key of ours signed.
			re, _ := Keys{Current: key}.Sign(c)
			if _, _, err2 := (Keys{Current: key}).Verify(re, 0); err2 != nil && !errors.Is(err2, ErrExpired) {
				t.Fatalf("re-signed claims do not verify: %v", err2)
			}
		}
	})
}

func TestSealPartition(t *testing.T) {
	for _, p := range []string{"", "part-1", "tenant/with:odd chars ✓", strings.Repeat("x", 512)} {
		aud := SealPartition(keyA, p)
		if aud != SealPartition(keyA, p) {
			t.Fatalf("%q: the sealed audience is not stable", p)
		}
		if strings.Contains(aud, p) && p != "" {
			t.Fatalf("%q: the audience shows the partition", p)
		}
		got, ok := OpenPartition(keyA, aud)
		if !ok || got != p {
			t.Fatalf("OpenPartition(SealPartition(%q)) = %q, %v", p, got, ok)
		}
		if _, ok := OpenPartition(keyB, aud); ok {
			t.Fatalf("%q: another key opened the audience", p)
		}
	}
	if SealPartition(keyA, "a") == SealPartition(keyA, "b") {
		t.Fatal("two partitions share an audience")
	}
	aud := []byte(SealPartition(keyA, "part-1"))
	aud[len(aud)-3] ^= 1
	if _, ok := OpenPartition(keyA, string(aud)); ok {
		t.Fatal("an edited audience opened")
	}
	for _, bad := range []string{"", "short", "!!!!"} {
		if _, ok := OpenPartition(keyA, bad); ok {
			t.Fatalf("OpenPartition(%q) succeeded", bad)
		}
	}
}

func FuzzOpenPartition(f *testing.F) {
	f.Add(SealPartition(keyA, "part-1"))
	f.Add("")
	f.Fuzz(func(t *testing.T, aud string) {
		if p, ok := OpenPartition(keyA, aud); ok && SealPartition(keyA, p) != aud {
			t.Fatalf("OpenPartition(%q) = %q, whose seal differs", aud, p)
		}
	})
}
