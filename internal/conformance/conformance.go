// Package conformance is the server's conformance mode: the test-control
// surface that an outside harness (the reference project's conformance
// catalog) drives over HTTP. The harness creates throw-away server
// instances, each with its own in-memory storage, virtual clock and
// settings, syncs real clients against them under /i/{id}, and inspects
// what they stored through control calls.
//
// The contract is conformance-mode.md of the shared documents. The mode is
// a test facility: it exists only behind the "syncgo conformance" command
// and listens only on a loopback address.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// ServerName is the name GET /__conformance/info reports.
const ServerName = "syncgo"

// Config configures Run.
type Config struct {
	// Listen is the address to listen on; it must name a loopback host
	// (127.0.0.1, ::1 or localhost). Port 0 picks a free port.
	Listen string
	// Stdout receives the one line "READY <port>" once the listener is up.
	Stdout io.Writer
	// Logger receives instance and request events. Default: discard.
	Logger *slog.Logger
	// Postgres, when set, is the URL of a Postgres database in which every
	// instance runs on schemas of its own (NewPostgres) instead of SQLite
	// files.
	Postgres string
}

// Run serves conformance mode on cfg.Listen until ctx ends, then closes
// every instance.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	ln, err := Listen(cfg.Listen)
	if err != nil {
		return err
	}
	var h *Harness
	if cfg.Postgres == "" {
		h = New(cfg.Logger)
	} else if h, err = NewPostgres(ctx, cfg.Logger, cfg.Postgres); err != nil {
		ln.Close()
		return err
	}
	defer h.Close()
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	if _, err := fmt.Fprintf(cfg.Stdout, "READY %d\n", ln.Addr().(*net.TCPAddr).Port); err != nil {
		hs.Close()
		return fmt.Errorf("announce readiness: %w", err)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		hs.Close()
	}
	return nil
}

// Listen opens a TCP listener on addr, refusing any address whose host is
// not a loopback address (an empty host would bind every interface).
func Listen(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if !isLoopbackHost(host) {
		return nil, fmt.Errorf("conformance mode listens only on a loopback address (127.0.0.1, ::1 or localhost), not %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("conformance mode: %q bound the non-loopback address %s", addr, ln.Addr())
	}
	return ln, nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
