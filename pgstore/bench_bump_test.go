package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// BenchmarkBumpAppendColumn is a schema bump that appends a nullable
// column to a table of 100,000 stored rows with as many logged upserts:
// the time the migration holds every writer (its locks), reported as
// ms/locked beside the whole bump.
func BenchmarkBumpAppendColumn(b *testing.B) {
	const rows = 100000
	var locked time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := newSchema(b)
		seedTasks(b, name, rows)
		var at time.Time
		s := openIn(b, name, Config{migrationLocked: func() { at = time.Now() }})
		b.StartTimer()
		ensure(b, s, testSchema(b, 2, schema.String("added").Null()))
		locked += time.Since(at)
	}
	b.ReportMetric(float64(locked.Milliseconds())/float64(b.N), "ms/locked")
}

// seedTasks fills the tasks table of schema name (testSchema version 1)
// with n rows encoded by its codec, each with one logged upsert, through
// COPY.
func seedTasks(tb testing.TB, name string, n int) {
	tb.Helper()
	ensure(tb, openIn(tb, name, Config{}), testSchema(tb, 1))
	v1, _ := testSchema(tb, 1).Table("tasks")
	rows := make([][]any, 0, n)
	changes := make([][]any, 0, n)
	for i := 0; i < n; i++ {
		id, owner, title := fmt.Sprintf("r%07d", i), "o"+strconv.Itoa(i%50), "title "+strconv.Itoa(i)
		p, err := v1.RowCodec().AppendRow(nil, []wire.Value{{Str: id}, {Str: "p"}, {Str: owner}, {Str: title},
			{Int: int64(i)}, {Null: true}, {Bool: true}, {Float: 1.5}, {Null: true}})
		if err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, []any{"bulk", id, id, "p", owner, title, int64(i), true, 1.5, int64(1), "{}", p})
		changes = append(changes, []any{"bulk", int64(i + 1), int32(0), "tasks", id, int16(1), int64(1), "{}", p})
	}
	conn := connectIn(tb, name)
	ctx := context.Background()
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"_sync_partition", "_sync_row_id", "id", "project_id",
		"owner_id", "title", "rank", "done", "score", "_sync_server_version", "_sync_scopes", "_sync_payload"}, pgx.CopyFromRows(rows)); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"sync_changes"}, []string{"partition", "commit_seq", "idx", "tbl", "row_id",
		"op", "row_version", "scopes", "payload"}, pgx.CopyFromRows(changes)); err != nil {
		tb.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE tasks, sync_changes"); err != nil {
		tb.Fatal(err)
	}
}
