// Package s3test gives tests an S3-compatible object store with a bucket
// of their own.
//
// With SYNCGO_TEST_S3 set to a URL with credentials
// (http://ACCESS:SECRET@127.0.0.1:8333), the store is that server, a real
// one that checks every request's signature (.ci/run starts SeaweedFS's S3
// gateway): each call creates a bucket with a fresh name and removes it,
// objects and open uploads included, at cleanup. Without it the store is
// gofakes3 in the test's process, which checks no signature; under
// CI=true its absence fails the test instead.
//
// A query parameter domain=D in that URL says that the server also
// answers virtual-host requests, those that name the bucket in the host
// name (BUCKET.D), as AWS does (SeaweedFS's -s3.domainName, MinIO's
// MINIO_DOMAIN). Server.VirtualHostTransport then reaches it under such
// names without DNS.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Env names the real object store the tests use.
const Env = "SYNCGO_TEST_S3"

// Server is an object store and the bucket a test got in it.
type Server struct {
	// URL is the store's base URL (scheme and host), Endpoint its host
	// and port.
	URL, Endpoint string
	Region        string
	AccessKey     string
	SecretKey     string
	Bucket        string
	// Real reports a real server (SYNCGO_TEST_S3), one that checks
	// signatures and expiry times; gofakes3 checks neither.
	Real bool
	// Domain is the host-name suffix under which the server answers
	// virtual-host requests (BUCKET.Domain); "" when it does not.
	Domain string
}

// Real reports whether the tests' object store is a real server
// (SYNCGO_TEST_S3 set), which runs in a process of its own.
func Real() bool { return os.Getenv(Env) != "" }

// Start returns an object store with a new, empty bucket whose name
// starts with prefix (the bucket is prefix itself on gofakes3).
func Start(tb testing.TB, prefix string) Server {
	tb.Helper()
	if !Real() {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set; CI=true requires the tests against a real S3 server (.ci/run starts one)", Env)
		}
		return fake(tb, prefix)
	}
	raw := os.Getenv(Env)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User == nil {
		tb.Fatalf("%s=%q: want http://ACCESS:SECRET@host:port", Env, raw)
	}
	secret, _ := u.User.Password()
	s := Server{URL: u.Scheme + "://" + u.Host, Endpoint: u.Host, Region: "us-east-1",
		AccessKey: u.User.Username(), SecretKey: secret, Real: true, Bucket: prefix + "-" + suffix(tb),
		Domain: u.Query().Get("domain")}
	c := s.Client(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		tb.Fatalf("%s: create bucket %s: %v", Env, s.Bucket, err)
	}
	tb.Cleanup(func() { s.remove(tb, c) })
	return s
}

func fake(tb testing.TB, bucket string) Server {
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	tb.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return Server{URL: srv.URL, Endpoint: u.Host, Region: "us-east-1", AccessKey: "test-key", SecretKey: "test-secret", Bucket: bucket}
}

// Client is a minio client of the store with the test's credentials.
func (s Server) Client(tb testing.TB) *minio.Client {
	tb.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: s.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// VirtualHostTransport is an HTTP transport that connects to the store
// whatever host a request names, so that a client addressing the bucket
// as BUCKET.Domain:port reaches it without a DNS entry for that name.
// The request keeps its host name, which the server routes and checks
// the signature by.
func (s Server) VirtualHostTransport() *http.Transport {
	var d net.Dialer
	return &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, s.Endpoint)
	}}
}

// remove deletes the bucket's open uploads, objects and the bucket.
func (s Server) remove(tb testing.TB, c *minio.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for u := range c.ListIncompleteUploads(ctx, s.Bucket, "", true) {
		if u.Err == nil {
			_ = c.RemoveIncompleteUpload(ctx, s.Bucket, u.Key)
		}
	}
	for o := range c.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err == nil {
			_ = c.RemoveObject(ctx, s.Bucket, o.Key, minio.RemoveObjectOptions{})
		}
	}
	if err := c.RemoveBucket(ctx, s.Bucket); err != nil {
		tb.Logf("%s: remove bucket %s: %v", Env, s.Bucket, err)
	}
}

func suffix(tb testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
