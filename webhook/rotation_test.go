package webhook

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/reaction"
)

// Rotation of a hook's secret: a delivery signed with the new secret and
// the old one carries one v1 per secret; a receiver holding either
// verifies it, one holding neither does not.

var (
	oldSecret   = []byte("old-secret-0123456789")
	newSecret   = []byte("new-secret-0123456789")
	otherSecret = []byte("other-secret-0123456789")
	rotNow      = time.Unix(1700000000, 0)
	rotBody     = []byte(`{"id":"k","attempt":1,"event":{"hook":"h"}}`)
)

// sigOf is the hex signature alone of body at rotNow under secret.
func sigOf(secret []byte, body []byte) string {
	_, sig, _ := strings.Cut(Sign(secret, rotNow, body), ",v1=")
	return sig
}

func TestSignAll(t *testing.T) {
	h := SignAll([][]byte{newSecret, oldSecret}, rotNow, rotBody)
	want := "t=1700000000,v1=" + sigOf(newSecret, rotBody) + ",v1=" + sigOf(oldSecret, rotBody)
	if h != want {
		t.Errorf("SignAll(new, old) = %q; want %q (the newest first)", h, want)
	}
	if one := SignAll([][]byte{newSecret}, rotNow, rotBody); one != Sign(newSecret, rotNow, rotBody) {
		t.Errorf("SignAll of one secret %q differs from Sign %q", one, Sign(newSecret, rotNow, rotBody))
	}
	if sigOf(newSecret, rotBody) == sigOf(oldSecret, rotBody) || len(sigOf(newSecret, rotBody)) != 64 {
		t.Errorf("signatures %q %q", sigOf(newSecret, rotBody), sigOf(oldSecret, rotBody))
	}
}

func TestVerifyDuringRotation(t *testing.T) {
	both := SignAll([][]byte{newSecret, oldSecret}, rotNow, rotBody)
	for name, secret := range map[string][]byte{"old": oldSecret, "new": newSecret} {
		if err := Verify(secret, both, rotBody, rotNow, time.Minute); err != nil {
			t.Errorf("a receiver holding only the %s secret: %v", name, err)
		}
	}
	// A receiver holding both (switching over) verifies a header of
	// either sender: one not rotated yet, one rotated, one done.
	for _, h := range []string{Sign(oldSecret, rotNow, rotBody), both, Sign(newSecret, rotNow, rotBody)} {
		if err := VerifyAny([][]byte{newSecret, oldSecret}, h, rotBody, rotNow, time.Minute); err != nil {
			t.Errorf("a receiver holding both, header %q: %v", h, err)
		}
	}
	// A receiver holding neither secret; the old receiver after the old
	// secret is removed from the hook.
	if err := Verify(otherSecret, both, rotBody, rotNow, time.Minute); err == nil || !strings.Contains(err.Error(), "mismatch") {
		t.Errorf("a receiver holding another secret: %v; want a mismatch", err)
	}
	if err := Verify(oldSecret, Sign(newSecret, rotNow, rotBody), rotBody, rotNow, time.Minute); err == nil {
		t.Error("the old secret verified a delivery signed only with the new one")
	}

	// Tampered: the body, the time (signatures kept), a signature.
	tampered := map[string]struct {
		header string
		body   []byte
	}{
		"body":      {both, append(slices.Clone(rotBody), ' ')},
		"time":      {strings.Replace(both, "t=1700000000", "t=1700000001", 1), rotBody},
		"signature": {"t=1700000000,v1=" + strings.Repeat("0", 64) + ",v1=" + sigOf(otherSecret, rotBody), rotBody},
		"uppercase": {"t=1700000000,v1=" + strings.ToUpper(sigOf(newSecret, rotBody)), rotBody},
		"truncated": {"t=1700000000,v1=" + sigOf(newSecret, rotBody)[:63], rotBody},
		"signed ts": {"t=+1700000000,v1=" + sigOf(newSecret, rotBody), rotBody},
		"two times": {both + ",t=1700000000", rotBody},
		"no v1":     {"t=1700000000,v0=" + sigOf(newSecret, rotBody), rotBody},
	}
	for name, c := range tampered {
		for _, secret := range [][]byte{oldSecret, newSecret} {
			if err := Verify(secret, c.header, c.body, rotNow, time.Minute); err == nil {
				t.Errorf("tampered %s (%q) verified", name, c.header)
			}
		}
	}
	// Outside the tolerance, either way.
	for _, at := range []time.Time{rotNow.Add(2 * time.Minute), rotNow.Add(-2 * time.Minute)} {
		if err := Verify(newSecret, both, rotBody, at, time.Minute); err == nil || !strings.Contains(err.Error(), "tolerance") {
			t.Errorf("checked at %v: %v; want the tolerance refused", at.Sub(rotNow), err)
		}
	}

	// Reordered entries, white space after commas, unknown keys and
	// empty parts: each secret still verifies.
	sn, so := sigOf(newSecret, rotBody), sigOf(oldSecret, rotBody)
	for _, h := range []string{
		"v1=" + so + ",v1=" + sn + ",t=1700000000",
		"v1=" + so + ",t=1700000000,v1=" + sn,
		"t=1700000000, v1=" + sn + ", v1=" + so,
		"t=1700000000,v0=abc,,v1=" + sn + ",v2=zz,v1=" + so,
	} {
		for name, secret := range map[string][]byte{"old": oldSecret, "new": newSecret} {
			if err := Verify(secret, h, rotBody, rotNow, time.Minute); err != nil {
				t.Errorf("reordered %q, %s secret: %v", h, name, err)
			}
		}
	}

	// The secrets given: none, or one too short, verify nothing.
	if err := VerifyAny(nil, both, rotBody, rotNow, time.Minute); err == nil {
		t.Error("no secret verified")
	}
	if err := VerifyAny([][]byte{newSecret, []byte("short")}, both, rotBody, rotNow, time.Minute); err == nil {
		t.Error("a list with a short secret verified")
	}
}

// A receiver built on the earlier Verify read only the last v1 of the
// header: the signatures are sent newest first so that such a receiver,
// still holding the old secret, keeps verifying while one previous
// secret is signed with.
func TestRotationKeepsLastSignatureForOldReceivers(t *testing.T) {
	both := SignAll([][]byte{newSecret, oldSecret}, rotNow, rotBody)
	last := both[strings.LastIndex(both, "v1=")+3:]
	if !hmac.Equal([]byte(last), []byte(sigOf(oldSecret, rotBody))) {
		t.Errorf("the last v1 of %q is not the previous secret's signature", both)
	}
}

// A header with thousands of signatures, or of many bytes, is refused
// before any HMAC: its cost is bounded whatever an attacker sends.
func TestVerifyOversizedHeader(t *testing.T) {
	good := sigOf(newSecret, rotBody)
	var b strings.Builder
	b.WriteString("t=1700000000")
	for range 5000 {
		b.WriteString(",v1=" + strings.Repeat("a", 64))
	}
	b.WriteString(",v1=" + good)
	// The same entries within the byte bound but above the count bound.
	many := "t=1700000000" + strings.Repeat(",v1=", MaxSignatures) + ",v1=" + good
	for name, h := range map[string]string{"5000 signatures": b.String(), "many short signatures": many,
		"long header": "t=1700000000,v1=" + good + ",x=" + strings.Repeat("y", MaxSignatureHeaderBytes)} {
		start := time.Now()
		err := Verify(newSecret, h, rotBody, rotNow, time.Minute)
		if err == nil || !(strings.Contains(err.Error(), "too many") || strings.Contains(err.Error(), "too long")) {
			t.Errorf("%s (%d bytes): %v; want it refused", name, len(h), err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("%s took %v", name, d)
		}
	}
	// Up to the bound, a valid signature anywhere verifies.
	full := "t=1700000000" + strings.Repeat(",v1="+strings.Repeat("b", 64), MaxSignatures-1) + ",v1=" + good
	if len(full) > MaxSignatureHeaderBytes {
		t.Fatalf("a header of %d signatures has %d bytes, over MaxSignatureHeaderBytes", MaxSignatures, len(full))
	}
	if err := Verify(newSecret, full, rotBody, rotNow, time.Minute); err != nil {
		t.Errorf("%d signatures, the last valid: %v", MaxSignatures, err)
	}
	// What a hook sends is well within what Verify reads.
	secrets := make([][]byte, MaxSecrets)
	for i := range secrets {
		secrets[i] = []byte("secret-number-" + strconv.Itoa(i) + "-0123456789")
	}
	if h := SignAll(secrets, rotNow, rotBody); len(h) > MaxSignatureHeaderBytes || MaxSecrets > MaxSignatures {
		t.Errorf("a hook's header of %d secrets has %d bytes", MaxSecrets, len(h))
	}
}

// A hook with previous secrets signs every delivery with each, newest
// first, and the checks refuse a bad list without naming any secret.
func TestDeliverWithPreviousSecrets(t *testing.T) {
	sc := testSchema(t)
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	hook := Hook{Name: "h", URL: srv.URL, Tables: []string{"todos"}, Secret: string(newSecret),
		PreviousSecrets: []string{string(oldSecret)}}
	_, handlers, err := Reactions([]Hook{hook}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &reaction.Delivery{Partition: "p", IdempotencyKey: `["p","c1","cc1","webhook:h"]`, Name: "h", Version: 1,
		Payload: json.RawMessage(`{"changes":[],"hook":"h"}`), Attempt: 1, MaxAttempts: 10}
	if err := handlers["h"](context.Background(), d); err != nil {
		t.Fatal(err)
	}
	h, body := rcv.got[0].Header.Get("Syncgo-Signature"), rcv.bodies[0]
	if n := strings.Count(h, "v1="); n != 2 {
		t.Errorf("header %q has %d signatures; want 2", h, n)
	}
	for name, secret := range map[string][]byte{"old": oldSecret, "new": newSecret} {
		if err := Verify(secret, h, body, time.Now(), time.Minute); err != nil {
			t.Errorf("the %s secret: %v", name, err)
		}
	}
	if err := Verify(otherSecret, h, body, time.Now(), time.Minute); err == nil {
		t.Error("another secret verified")
	}

	five := make([]string, MaxSecrets)
	for i := range five {
		five[i] = "previous-secret-" + strconv.Itoa(i) + "-0123456789"
	}
	for _, c := range []struct {
		mod  func(*Hook)
		want string
	}{
		{func(h *Hook) { h.Secret = "" }, "need a secret"},
		{func(h *Hook) { h.PreviousSecrets = []string{"short-prev"} }, "previous_secrets[0] has 10 bytes"},
		{func(h *Hook) { h.PreviousSecrets = []string{string(newSecret)} }, "previous_secrets[0] is the secret itself"},
		{func(h *Hook) { h.PreviousSecrets = []string{string(oldSecret), string(oldSecret)} }, "previous_secrets[1] repeats previous_secrets[0]"},
		{func(h *Hook) { h.PreviousSecrets = five }, "5 secrets: at most 4"},
		{func(h *Hook) { h.PreviousSecrets, h.PreviousSecretFiles = nil, []string{"/run/secrets/old"} }, "read by syncgo serve"},
		{func(h *Hook) { h.Secret, h.SecretFile = "", "/run/secrets/hook" }, "read by syncgo serve"},
	} {
		h := hook
		c.mod(&h)
		err := Check([]Hook{h}, sc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error naming %q", h.PreviousSecrets, err, c.want)
			continue
		}
		for _, s := range append([]string{h.Secret}, h.PreviousSecrets...) {
			if s != "" && strings.Contains(err.Error(), s) {
				t.Errorf("the error %q shows a secret", err)
			}
		}
	}
	// Up to MaxSecrets in all is taken.
	h3 := hook
	h3.PreviousSecrets = five[:MaxSecrets-1]
	if err := Check([]Hook{h3}, sc); err != nil {
		t.Errorf("%d previous secrets: %v", MaxSecrets-1, err)
	}
}
