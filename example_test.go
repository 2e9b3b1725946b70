package syncgo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/wire"
)

// Embedding syncgo in a Go backend: a store, a compiled schema, the host's
// authentication and scope resolution, and the handler mounted on the
// host's mux. This is the README's embedding snippet, run.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "syncgo-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The storage driver: SQLite here, pgstore.Open for Postgres.
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(dir, "app.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// The schema: the Go builder, or schema.ParseJSON of the schema IR.
	compiled, err := schema.New(1).
		Table("tasks", "id", schema.String("id"), schema.String("list_id"), schema.String("title")).
		Scope("list:{list_id}").
		Compile()
	if err != nil {
		log.Fatal(err)
	}

	srv, err := syncgo.New(syncgo.Config{
		Store:  st,
		Schema: compiled,
		// The host's authentication: here a bearer token that names the
		// actor (verify a real token in production).
		Authenticate: func(r *http.Request) (syncgo.Auth, error) {
			actor, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || actor == "" {
				return syncgo.Auth{}, errors.New("no bearer token")
			}
			return syncgo.Auth{ActorID: actor, Partition: "default"}, nil
		},
		// The lists each actor may read and write.
		ResolveScopes: func(ctx context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
			return map[string][]string{"list_id": {"inbox-" + q.ActorID}}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil { // the readiness gate: schema, migration, checkpoints
		log.Fatal(err)
	}
	defer srv.Stop(ctx)

	mux := http.NewServeMux()
	mux.Handle("/api/sync/", http.StripPrefix("/api/sync", srv.Handler()))
	hs := httptest.NewServer(mux)
	defer hs.Close()

	// A client's first request: acquire the log epoch.
	req, err := (&wire.Request{Version: wire.Version3,
		Header: &wire.ReqHeader{ClientID: "device-1", SchemaVersion: 1},
		Pull:   &wire.PullHeader{Accept: wire.AcceptInlineRows}}).MarshalBinary()
	if err != nil {
		log.Fatal(err)
	}
	for _, token := range []string{"", "alice"} {
		r, _ := http.NewRequest("POST", hs.URL+"/api/sync/sync", bytes.NewReader(req))
		r.Header.Set("Content-Type", syncgo.ProtocolContentType)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// 401 Unauthorized
	// 200 OK
}
