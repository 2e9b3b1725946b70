package syncgo_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/s3test"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// genReader yields n pseudo-random bytes from a seed without holding
// them: the same seed yields the same bytes.
type genReader struct {
	rng  *rand.ChaCha8
	left int64
}

func newGenReader(seed byte, n int64) *genReader {
	var s [32]byte
	s[0] = seed
	return &genReader{rng: rand.NewChaCha8(s), left: n}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, _ := g.rng.Read(p)
	g.left -= int64(n)
	return n, nil
}

// heapPeak samples the heap in use until stop is called and returns the
// peak above the level when it started.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
				peak.Store(m.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// An upload and a download never hold a whole blob in memory: the heap
// of the process (server and client) grows by a bounded amount, whatever
// the blob's size. The size is SYNCGO_BLOB_MEMORY_BYTES (default 64 MiB;
// BENCHMARKS.md reports 1 GiB).
func TestE2EBlobStreamingMemory(t *testing.T) {
	size := int64(64 << 20)
	if v := os.Getenv("SYNCGO_BLOB_MEMORY_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		size = n
	}
	for _, k := range blobKinds {
		t.Run(k.name, func(t *testing.T) {
			if k.s3 && !s3test.Real() {
				// The fake object store runs in this process and keeps
				// every part in memory: the heap would measure it, not
				// us. A real one (SYNCGO_TEST_S3) runs in another.
				t.Skip("the in-process S3 server holds uploads in memory")
			}
			// Sequential: a parallel transfer would count in the other's heap.
			e := newBlobEnv(t, k, func(c *syncgo.Config) { c.Limits.MaxBlobBytes = size })
			h := sha256.New()
			if _, err := io.Copy(h, newGenReader(7, size)); err != nil {
				t.Fatal(err)
			}
			id := "sha256:" + hex.EncodeToString(h.Sum(nil))

			stop := heapPeak()
			start := time.Now()
			req, err := http.NewRequest(http.MethodPut, e.url+"/blobs/"+id, newGenReader(7, size))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			req.Header.Set("Authorization", "Bearer alice")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			up, upTook := stop(), time.Since(start)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("upload: HTTP %d", resp.StatusCode)
			}
			c := e.client("alice", sspclient.Options{})
			if o := e.attach(c, "big", "p1", ptr(blobRef(id, int(size)))); o.Status != wire.PushApplied {
				t.Fatal(statusOf(o))
			}

			stop = heapPeak()
			start = time.Now()
			req, _ = http.NewRequest(http.MethodGet, e.url+"/blobs/"+id, nil)
			req.Header.Set("Authorization", "Bearer alice")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var dh hash.Hash = sha256.New()
			n, err := io.Copy(dh, resp.Body)
			resp.Body.Close()
			down, downTook := stop(), time.Since(start)
			if err != nil || n != size || "sha256:"+hex.EncodeToString(dh.Sum(nil)) != id {
				t.Fatalf("download: %d of %d bytes, %v", n, size, err)
			}
			mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
			t.Logf("%s: %d MiB blob: upload %v (%.0f MiB/s), peak heap +%s; download %v (%.0f MiB/s), peak heap +%s",
				k.name, size>>20, upTook.Round(time.Millisecond), float64(size>>20)/upTook.Seconds(), mib(up),
				downTook.Round(time.Millisecond), float64(size>>20)/downTook.Seconds(), mib(down))
			const bound = 24 << 20
			if up > bound || down > bound {
				t.Fatalf("a %d MiB transfer grew the heap by %s (upload) / %s (download); want under %s",
					size>>20, mib(up), mib(down), mib(bound))
			}
		})
	}
}
