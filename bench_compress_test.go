package syncgo_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkCompressedPull measures a compressed pull response of a few
// KiB (a bootstrap of 40 rows, ~5 KiB, zstd) served to 64 requests at
// once, more than the pooled compressors: the bytes allocated per pull,
// server and client together, are what a burst of such pulls (a
// reconnect storm's recovery pulls) costs in memory.
//
//	go test -run '^$' -bench BenchmarkCompressedPull -benchtime 2000x .
func BenchmarkCompressedPull(b *testing.B) {
	url, sc := startE2EBenchServer(b, benchDrivers()[0])
	ctx := context.Background()
	w, err := sspclient.New(url, "writer", sc, sspclient.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 40 {
		if _, err := w.Upsert("tasks", taskRow(fmt.Sprintf("t%02d", i), "p1", fmt.Sprintf("a task with a compressible title %d", i))); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.SyncUntilQuiet(ctx, 5); err != nil {
		b.Fatal(err)
	}
	epoch, ok := w.LogEpoch()
	if !ok {
		b.Fatal("the writer has no log epoch")
	}
	req, err := (&wire.Request{Version: 3,
		Header: &wire.ReqHeader{ClientID: "bench-device", SchemaVersion: 1, LogEpoch: &epoch},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows},
		Subscriptions: []*wire.Subscription{{ID: "s", Table: "tasks",
			Scopes: wire.ScopeMap{{Key: "project_id", Values: []string{"p1"}}}, Cursor: -1}}}).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 128, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	pull := func() (int, error) {
		r, err := http.NewRequest(http.MethodPost, url+"/sync", bytes.NewReader(req))
		if err != nil {
			return 0, err
		}
		r.Header.Set("Content-Type", sspclient.ContentType)
		r.Header.Set("Authorization", "Bearer reader")
		r.Header.Set("Accept-Encoding", "zstd")
		resp, err := hc.Do(r)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && (resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "zstd") {
			err = fmt.Errorf("status %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		return int(n), err
	}
	if n, err := pull(); err != nil || n == 0 {
		b.Fatalf("a pull of %d bytes (%v), want a compressed one", n, err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pull(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
