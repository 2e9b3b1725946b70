package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/store"
)

// Two stores on one database through a PgBouncer in transaction mode
// with two server connections between them: Open finds the pooler and
// sends unnamed statements, and concurrent writes and reads of both
// stores all succeed. A direct connection is not taken for a pooler,
// and a URL that names its own exec mode keeps it.
func TestThroughTransactionPooler(t *testing.T) {
	db := pgtest.Database(t, "syncgo_pooler")
	via := pgtest.Bouncer(t, db, "transaction", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, c := range []struct {
		url  string
		want bool
	}{{db, false}, {via, true}} {
		cc, err := pgx.ParseConfig(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := detectPooler(ctx, cc)
		if err != nil || got != c.want {
			t.Fatalf("detectPooler(%s) = %v, %v; want %v", c.url, got, err, c.want)
		}
	}

	open := func(dsn string) *Store {
		s, err := Open(ctx, Config{URL: dsn, MaxConns: 6})
		if err != nil {
			t.Fatalf("Open through the pooler: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(via), open(via)
	for _, s := range []*Store{a, b} {
		if m := s.pool.Config().ConnConfig.DefaultQueryExecMode; m != pooledExecMode {
			t.Fatalf("exec mode through the pooler = %v; want %v", m, pooledExecMode)
		}
	}
	if m := open(db).pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
		t.Fatalf("exec mode of a direct connection = %v; want the statement cache", m)
	}
	u, err := url.Parse(via)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_statement")
	u.RawQuery = q.Encode()
	named := open(u.String())
	if m := named.pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
		t.Fatalf("exec mode named in the URL = %v; want it kept", m)
	}
	_ = named.Close()

	sc := testSchema(t, 1)
	ensure(t, a, sc)
	ensure(t, b, sc)
	const writers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers*each)
	for si, s := range []*Store{a, b} {
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					id := fmt.Sprintf("t-%d-%d-%d", si, w, i)
					rw := task{id: id, project: "p1", owner: "o1"}.write(t, sc, 1)
					err := s.Write(ctx, "p", func(ctx context.Context, tx store.WriteTx) error {
						if err := tx.UpsertRow(ctx, rw); err != nil {
							return err
						}
						_, err := tx.AppendCommit(ctx, store.NewCommit{ClientID: fmt.Sprintf("c%d-%d", si, w),
							ClientCommitID: id, ActorID: "a1", CreatedAtMs: 1000, Changes: []store.Change{upsertChange(rw)}})
						return err
					})
					if err != nil {
						errs <- fmt.Errorf("write %s: %w", id, err)
						continue
					}
					if _, err := s.Partition(ctx, "p"); err != nil {
						errs <- fmt.Errorf("read after %s: %w", id, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d writes or reads failed through the pooler, first: %s", len(failed), 2*writers*each, strings.Join(failed[:min(3, len(failed))], "; "))
	}
	if n := queryInt(t, a, "SELECT count(*) FROM tasks"); n != 2*writers*each {
		t.Fatalf("%d rows; want %d", n, 2*writers*each)
	}
	p, err := b.Partition(ctx, "p")
	if err != nil || p.MaxCommitSeq != 2*writers*each {
		t.Fatalf("partition = %+v, %v; want %d commits", p, err, 2*writers*each)
	}

	// A read-only store through the pooler (which refuses the
	// default_transaction_read_only startup parameter) reads and refuses
	// writes.
	ro, err := Open(ctx, Config{URL: via, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open through the pooler: %v", err)
	}
	defer ro.Close()
	if p, err := ro.Partition(ctx, "p"); err != nil || p.MaxCommitSeq != 2*writers*each {
		t.Fatalf("read-only partition = %+v, %v", p, err)
	}
	err = ro.Write(ctx, "p", func(context.Context, store.WriteTx) error { return nil })
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Write = %v; want ErrReadOnly", err)
	}
}

// A pool the embedder gives is used as it is: through a pooler, one that
// sends named prepared statements is warned about at Open, and one set
// to pgx's cache_describe works without a warning.
func TestGivenPoolThroughPooler(t *testing.T) {
	db := pgtest.Database(t, "syncgo_givenpool")
	via := pgtest.Bouncer(t, db, "transaction", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		pc, err := pgxpool.ParseConfig(via)
		if err != nil {
			t.Fatal(err)
		}
		pc.ConnConfig.DefaultQueryExecMode = mode
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		s, err := Open(ctx, Config{Pool: pool, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		warned := strings.Contains(logs.String(), "sends named prepared statements")
		switch {
		case mode == pgx.QueryExecModeCacheStatement && !warned:
			t.Errorf("a pool with the statement cache through the pooler: no warning (Open: %v); log:\n%s", err, logs.String())
		case mode == pgx.QueryExecModeCacheDescribe && (warned || err != nil):
			t.Errorf("a pool with cache_describe through the pooler: Open %v, log:\n%s", err, logs.String())
		}
		if err == nil {
			if mode == pgx.QueryExecModeCacheDescribe {
				sc := testSchema(t, 1)
				ensure(t, s, sc)
				apply(t, s, "p", task{id: "t1", project: "p1", owner: "o1"}.write(t, sc, 1))
			}
			_ = s.Close()
		}
		pool.Close()
	}
}

// TestListenThroughPooler: a listen connection through a transaction-mode
// pooler takes LISTEN and delivers no notification, so the listener
// reports itself lost instead of listening; through a session-mode
// pooler it listens and delivers.
func TestListenThroughPooler(t *testing.T) {
	for _, c := range []struct {
		mode     string
		delivers bool
	}{{"transaction", false}, {"session", true}} {
		t.Run(c.mode, func(t *testing.T) {
			via := pgtest.Bouncer(t, testURL(t), c.mode, 2)
			s := openIn(t, newSchema(t), Config{ListenURL: via})
			ensure(t, s, testSchema(t, 1))
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan store.CommitNotification, 64)
			done := make(chan error, 1)
			go func() {
				done <- s.ListenCommits(ctx, func(n store.CommitNotification) {
					select {
					case got <- n:
					default:
					}
				})
			}()
			t.Cleanup(func() { cancel(); <-done })
			var first store.CommitNotification
			select {
			case first = <-got:
			case <-time.After(listenWait + 10*time.Second):
				t.Fatal("the listener reported nothing")
			}
			if !c.delivers {
				if !first.Lost {
					t.Fatalf("first notification through a %s pooler = %+v; want Lost", c.mode, first)
				}
				return
			}
			if !first.Reconnected {
				t.Fatalf("first notification through a %s pooler = %+v; want Reconnected", c.mode, first)
			}
			prefix := uniq("pooled-")
			seq := applyTask(t, s, prefix, "t1")
			for {
				select {
				case n := <-got:
					if n.Lost || n.Reconnected {
						t.Fatalf("notification %+v; want %s at %d", n, prefix, seq)
					}
					if n.Partition == prefix && n.Seq == seq {
						return
					}
				case <-time.After(listenWait):
					t.Fatalf("no notification of %s through a %s pooler", prefix, c.mode)
				}
			}
		})
	}
}
