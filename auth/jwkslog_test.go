package auth

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/binarytest"
)

// A JWKS fetch that failed is logged naming the URL without the password
// of its user info (an identity provider behind basic authentication).
func TestJWKSFailureLogHidesPassword(t *testing.T) {
	srv := newJWKSServer(t)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	var log binarytest.Log // written by the refresher goroutine
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
