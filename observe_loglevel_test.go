package syncgo_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/store"
)

// logRecord is one server log line as JSON.
type logRecord struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	// Err is the record's err attribute as logged: a string, or an
	// object when the handler marshalled the error as JSON.
	Err json.RawMessage `json:"err"`
}

// logRecords parses a JSON log.
func logRecords(t *testing.T, log string) []logRecord {
	t.Helper()
	var out []logRecord
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var r logRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// bindFaultStore fails BindClient on demand: a storage failure before
// any response byte, answered with the §10.1 JSON body.
type bindFaultStore struct {
	store.Store
	fail atomic.Bool
}

func (b *bindFaultStore) BindClient(ctx context.Context, partition string, rec store.ClientRecord) (store.ClientRecord, error) {
	if b.fail.Load() {
		return store.ClientRecord{}, errInjected
	}
	return b.Store.BindClient(ctx, partition, rec)
}

// A storage failure is a server fault: it is logged at ERROR with its
// cause, in the JSON log format too (an operator must read what failed,
// not the client's "internal server error"), whether it came before the
// response began (the JSON error body) or after (an in-band ERROR frame).
func TestServerFaultLoggedWithCause(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		var server lockedBuffer
		var fs *faultyStore
		var bs *bindFaultStore
		e := newE2EEnv(t, d, func(c *syncgo.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(&server, &slog.HandlerOptions{Level: slog.LevelDebug}))
			bs = &bindFaultStore{Store: c.Store}
			fs = &faultyStore{Store: bs}
			c.Store = fs
		})
		w := e.client("writer", sspclient.Options{})
		mustUpsert(t, w, taskRow("a1", "p1", "a1"))
		syncQuiet(t, w)

		errorRecords := func() []logRecord {
			var out []logRecord
			for _, r := range logRecords(t, server.String()) {
				if r.Level == "ERROR" {
					out = append(out, r)
				}
			}
			return out
		}
		for _, tc := range []struct {
			name   string
			inject func(on bool)
		}{
			{"before the response", func(on bool) { bs.fail.Store(on) }},
			{"in the response", func(on bool) {
				p1 := "p1"
				if on {
					fs.failScope.Store(&p1)
				} else {
					fs.failScope.Store(nil)
				}
			}},
		} {
			before := len(errorRecords())
			tc.inject(true)
			c := e.client("alice-"+strings.ReplaceAll(tc.name, " ", "-"), sspclient.Options{})
			mustSubscribe(t, c, "s", "p1")
			if _, err := c.Sync(context.Background()); err == nil {
				t.Fatalf("%s: a round whose storage failed succeeded", tc.name)
			}
			tc.inject(false)
			eventually(t, "the fault's log record", func() bool { return len(errorRecords()) > before })
			faults := errorRecords()[before:]
			if len(faults) != 1 || !strings.Contains(string(faults[0].Err), errInjected.Error()) {
				t.Errorf("%s: want one ERROR record naming the cause %q, got %d:\n%s", tc.name, errInjected, len(faults), server.String())
			}
		}
	})
}
