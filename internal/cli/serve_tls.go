package cli

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/syncgo/syncgo/internal/config"
)

// bindTLSFlags declares the flags of the main listener's TLS; the
// returned function applies those given on the command line over c.
func bindTLSFlags(fs *flag.FlagSet) func(c *config.Config) {
	var cert, key string
	fs.StringVar(&cert, "tls-cert", "", "PEM certificate (chain) file: with -tls-key the listener serves HTTPS and wss; SIGHUP reloads it (tls_cert_file, SYNCGO_TLS_CERT_FILE)")
	fs.StringVar(&key, "tls-key", "", "PEM private key file of -tls-cert (tls_key_file, SYNCGO_TLS_KEY_FILE)")
	return func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "tls-cert":
				c.TLSCertFile = cert
			case "tls-key":
				c.TLSKeyFile = key
			}
		})
	}
}

// certReloader serves a certificate loaded from files, loaded again on
// SIGHUP: a renewed certificate is taken without a restart. A reload that
// fails keeps the certificate being served.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	cert              atomic.Pointer[tls.Certificate]
	sig               chan os.Signal
	done              chan struct{}
}

// newCertReloader loads the certificate and starts watching SIGHUP until
// close.
func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger,
		sig: make(chan os.Signal, 1), done: make(chan struct{})}
	if err := r.load(); err != nil {
		return nil, err
	}
	signal.Notify(r.sig, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-r.sig:
				if err := r.load(); err != nil {
					logger.Error("TLS certificate reload failed; the previous certificate is still served", "err", err)
				} else {
					logger.Info("TLS certificate reloaded", "cert_file", certFile)
				}
			case <-r.done:
				return
			}
		}
	}()
	return r, nil
}

func (r *certReloader) load() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	r.cert.Store(&c)
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

func (r *certReloader) close() {
	signal.Stop(r.sig)
	close(r.done)
}

// tlsConfig is the main listener's TLS configuration: HTTP/2 and
// HTTP/1.1 (a WebSocket upgrade is made over HTTP/1.1), TLS 1.2 at least.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{GetCertificate: r.getCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}
