package cli_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/sspclient"
)

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 with
// the serial given, and its key, as PEM files, and returns the
// certificate.
func writeSelfSigned(t *testing.T, certFile, keyFile string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "syncgo test"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// With -tls-cert and -tls-key the binary serves HTTPS: the startup line
// says https://, a client trusting the certificate syncs over it (HTTP/2
// negotiated), a wss socket upgrades and gets hello, and SIGHUP makes it
// serve a renewed certificate. One of the two files without the other is
// refused at start.
func TestBinaryTLS(t *testing.T) {
	bin := binarytest.Build(t)
	sc, schemaPath := exampleSchema(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := writeSelfSigned(t, certFile, keyFile, 1)

	if _, err := binarytest.Start(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "x.db"),
		"-tls-cert", certFile); err == nil || !strings.Contains(err.Error(), "tls_cert_file and tls_key_file") {
		t.Fatalf("-tls-cert without -tls-key: %v, want a refusal naming both", err)
	}

	p := binarytest.Serve(t, bin, binarytest.Options{}, "-listen", "127.0.0.1:0", "-db", filepath.Join(dir, "tls.db"),
		"-schema", schemaPath, "-tls-cert", certFile, "-tls-key", keyFile)
	if !strings.HasPrefix(p.URL, "https://127.0.0.1:") {
		t.Fatalf("startup line %q: want an https:// URL", p.Line)
	}
	pool := x509.NewCertPool()
	pool.AddCert(first)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}

	// A plain client does not trust the certificate.
	if _, err := http.Get(p.URL + "/readyz"); err == nil {
		t.Fatal("an untrusting client was served: the listener is not TLS")
	}
	resp, err := hc.Get(p.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.ProtoMajor != 2 {
		t.Fatalf("/readyz over TLS: %d %s tls=%v", resp.StatusCode, resp.Proto, resp.TLS != nil)
	}

	c, err := sspclient.New(p.URL, "alice", sc, sspclient.Options{HTTPClient: hc})
	must(t, err)
	must(t, c.Subscribe("l1", "todos", map[string][]string{"list_id": {"l1"}}))
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatalf("sync over HTTPS: %v", err)
	}

	wsURL := "wss" + strings.TrimPrefix(p.URL, "https") + "/realtime?clientId=" + url.QueryEscape(c.ClientID())
	d := ws.Dialer{TLSConfig: &tls.Config{RootCAs: pool}, Timeout: 10 * time.Second,
		Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer alice"}})}
	conn, br, _, err := d.Dial(context.Background(), wsURL)
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	expectHello(t, conn, br)
	conn.Close()

	// SIGHUP reloads the files: the renewed certificate is served.
	second := writeSelfSigned(t, certFile, keyFile, 2)
	pool.AddCert(second)
	must(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	host := strings.TrimPrefix(p.URL, "https://")
	deadline := time.Now().Add(10 * time.Second)
	for {
		tc, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatalf("TLS dial after SIGHUP: %v", err)
		}
		serial := tc.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		tc.Close()
		if serial == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still serving certificate %d 10 s after SIGHUP", serial)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-p.Exited():
		t.Fatal("the process exited on SIGHUP")
	default:
	}
	// config check loads the pair: a good one is summarized, a key that
	// is not the certificate's fails.
	cfgFile := filepath.Join(dir, "tls.yaml")
	must(t, os.WriteFile(cfgFile, []byte("tls_cert_file: cert.pem\ntls_key_file: key.pem\n"), 0o600))
	if out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", cfgFile); code != 0 || !strings.Contains(out, "TLS: certificate") {
		t.Fatalf("config check of a good pair: %d %s %s", code, out, errOut)
	}
	writeSelfSigned(t, filepath.Join(dir, "other.pem"), keyFile, 3) // a new key: cert.pem no longer matches it
	if _, errOut, code := binarytest.Run(t, bin, nil, "config", "check", cfgFile); code != 1 || !strings.Contains(errOut, "tls_cert_file") {
		t.Fatalf("config check of a mismatched pair: %d %s", code, errOut)
	}
}
