package syncgo_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
)

// BenchmarkObservedRound measures one push+pull round (an upsert pushed
// and the pull that follows, over real HTTP, on a SQLite file) without
// observability, with metrics, and with metrics and an access log (JSON,
// discarded after formatting), and with all three and a span per request
// (sampled, batched to an exporter that drops them): the difference is
// what the metrics, the log and the traces cost a request.
//
//	go test -run '^$' -bench BenchmarkObservedRound -count 5 .
func BenchmarkObservedRound(b *testing.B) {
	for _, mode := range []string{"bare", "metrics", "metrics+accesslog", "metrics+accesslog+tracing"} {
		b.Run(mode, func(b *testing.B) {
			st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(b.TempDir(), "bench.db")})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sc, err := schema.New(1).
				Table("tasks", "id", schema.String("id"), schema.String("project_id"), schema.String("title"),
					schema.Boolean("done"), schema.Integer("rank").Null(), schema.JSON("notes").Null()).
				Scope("project:{project_id}").Compile()
			if err != nil {
				b.Fatal(err)
			}
			cfg := syncgo.Config{Store: st, Schema: sc, Authenticate: bearerAuth, RetentionInterval: -1,
				ResolveScopes: func(context.Context, syncgo.ScopeRequest) (map[string][]string, error) {
					return map[string][]string{"project_id": {"*"}}, nil
				}}
			if mode != "bare" {
				cfg.Metrics = prometheus.NewRegistry()
			}
			if mode != "bare" && mode != "metrics" {
				cfg.AccessLog = slog.New(slog.NewJSONHandler(discardWriter{}, nil))
			}
			if mode == "metrics+accesslog+tracing" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer tp.Shutdown(context.Background())
				cfg.TracerProvider = tp
			}
			srv, err := syncgo.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop(context.Background())
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			c, err := sspclient.New(hs.URL, "alice", sc, sspclient.Options{AcceptEncoding: "identity"})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := c.Upsert("tasks", map[string]any{"id": fmt.Sprintf("t%d", i%64), "project_id": "p1",
					"title": "x", "done": false, "rank": nil, "notes": nil}); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardWriter formats nothing away: the handler still encodes each line.
type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
