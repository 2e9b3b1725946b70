package auth

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the JWKS refresher's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A JWKS fetch that failed is logged naming the URL without the password
// of its user info (an identity provider behind basic authentication).
func TestJWKSFailureLogHidesPassword(t *testing.T) {
	srv := newJWKSServer(t)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	var log syncBuffer
	u := strings.Replace(srv.URL, "://", "://svc:JWKS-PASSW0RD@", 1)
	newAuth(t, Config{JWKSURL: u, JWKSRefresh: 20 * time.Millisecond, HTTPClient: srv.Client(),
		Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "fetching the JWKS failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no JWKS failure logged:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(log.String(), "JWKS-PASSW0RD") {
		t.Fatalf("the log shows the JWKS password:\n%s", log.String())
	}
}
