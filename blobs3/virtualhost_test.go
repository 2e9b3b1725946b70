package blobs3

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncgo/syncgo/internal/s3test"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/store/storetest"
)

// hostLog is a transport that records the host name of every request.
type hostLog struct {
	next  http.RoundTripper
	mu    sync.Mutex
	hosts map[string]int
}

func (h *hostLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.hosts[r.URL.Host]++
	h.mu.Unlock()
	return h.next.RoundTrip(r)
}

// virtualHost returns options that address srv's bucket in the host
// name, as a store does without path_style (the default, and what AWS
// expects), and the log of the hosts its requests named.
func virtualHost(tb testing.TB, srv s3test.Server) (Options, *hostLog) {
	tb.Helper()
	_, port, err := net.SplitHostPort(srv.Endpoint)
	if err != nil {
		tb.Fatal(err)
	}
	hosts := &hostLog{next: srv.VirtualHostTransport(), hosts: map[string]int{}}
	o := options(srv)
	o.PathStyle, o.Endpoint, o.Transport = false, net.JoinHostPort(srv.Domain, port), hosts
	return o, hosts
}

// virtualHostServer starts a bucket on a server that answers
// virtual-host requests, or skips the test where there is none (CI has
// one: .ci/s3-server).
func virtualHostServer(tb testing.TB) s3test.Server {
	tb.Helper()
	srv := s3test.Start(tb, "vhost")
	if srv.Domain == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s names no domain=; CI requires a server that answers virtual-host requests", s3test.Env)
		}
		tb.Skipf("no virtual-host domain in %s", s3test.Env)
	}
	return srv
}

// Without path_style, every request names the bucket in the host name,
// and the store keeps its contract against a server that routes by it
// and checks the signature over that host.
func TestVirtualHostContract(t *testing.T) {
	storetest.RunBlobStore(t, func(tb testing.TB) (store.BlobStore, func(testing.TB) store.BlobStore) {
		srv := virtualHostServer(tb)
		o, hosts := virtualHost(tb, srv)
		tb.Cleanup(func() {
			want := srv.Bucket + "." + o.Endpoint
			hosts.mu.Lock()
			defer hosts.mu.Unlock()
			for h, n := range hosts.hosts {
				if h != want {
					tb.Errorf("%d requests to %s; want every one to %s", n, h, want)
				}
			}
		})
		return mustOpen(tb, o), func(tb testing.TB) store.BlobStore { return mustOpen(tb, o) }
	})
}

// A presigned GET of a virtual-host store names the bucket in its host,
// serves the blob, and is refused with a changed signature.
func TestVirtualHostPresignedGet(t *testing.T) {
	srv := virtualHostServer(t)
	o, _ := virtualHost(t, srv)
	s := mustOpen(t, o)
	ctx := context.Background()
	b, id := blob(70_000)
	if err := s.PutBlob(ctx, "p", id, "image/png", bytes.NewReader(b), 1); err != nil {
		t.Fatal(err)
	}
	u, err := s.PresignBlobGet(ctx, "p", id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + srv.Bucket + "." + o.Endpoint + "/"; !strings.HasPrefix(u, want) {
		t.Fatalf("presigned URL %s; want it under %s", u, want)
	}
	c := &http.Client{Transport: srv.VirtualHostTransport()}
	get := func(u string) (int, []byte) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, got
	}
	if st, got := get(u); st != 200 || !bytes.Equal(got, b) {
		t.Fatalf("presigned GET: %d, %d bytes; want 200 and %d", st, len(got), len(b))
	}
	i := strings.Index(u, "X-Amz-Signature=") + len("X-Amz-Signature=")
	digit := "0"
	if u[i] == '0' {
		digit = "1"
	}
	changed := u[:i] + digit + u[i+1:]
	if st, _ := get(changed); st != 403 {
		t.Fatalf("a changed signature: %d; want 403", st)
	}
}
