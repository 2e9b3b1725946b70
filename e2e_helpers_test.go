package syncgo_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
)

// task returns the values of a full tasks row.
func taskRow(id, project, title string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "title": title, "done": false, "rank": nil, "notes": nil}
}

// syncQuiet syncs a client until it is quiet and fails the test on error.
func syncQuiet(t *testing.T, c *sspclient.Client) []*sspclient.RoundResult {
	t.Helper()
	rounds, err := c.SyncUntilQuiet(context.Background(), 50)
	if err != nil {
		t.Fatalf("client %s: SyncUntilQuiet: %v", c.ClientID(), err)
	}
	return rounds
}

// mustUpsert queues an upsert and fails the test on error.
func mustUpsert(t *testing.T, c *sspclient.Client, values map[string]any, opts ...sspclient.OpOption) string {
	t.Helper()
	id, err := c.Upsert("tasks", values, opts...)
	if err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	return id
}

// mustSubscribe subscribes a client to tasks of the projects.
func mustSubscribe(t *testing.T, c *sspclient.Client, id string, projects ...string) {
	t.Helper()
	if err := c.Subscribe(id, "tasks", map[string][]string{"project_id": projects}); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
}

// sameRows fails the test when two row renderings differ, listing the
// differences.
func sameRows(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s missing (want %s)", id, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("  %s: got %s, want %s", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s unexpected: %s", id, g))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%s: %d rows differ:\n%s", what, len(diffs), strings.Join(diffs, "\n"))
	}
}

// pushed returns the outcome of a commit in a round, failing when absent.
func pushed(t *testing.T, res *sspclient.RoundResult, commitID string) sspclient.Outcome {
	t.Helper()
	for _, o := range res.Pushed {
		if o.CommitID == commitID {
			return o
		}
	}
	t.Fatalf("round has no PUSH_RESULT for %s (got %d results)", commitID, len(res.Pushed))
	return sspclient.Outcome{}
}

// section returns a round's section of a subscription, failing when absent.
func sectionOf(t *testing.T, res *sspclient.RoundResult, id string) sspclient.Section {
	t.Helper()
	for _, s := range res.Sections {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("round has no section for subscription %s", id)
	return sspclient.Section{}
}

// columnBits renders a conflictColumns bitmap as the names it marks.
func columnBits(t *testing.T, c *sspclient.Client, table string, bitmap []byte) []string {
	t.Helper()
	tbl, _ := c.Schema().Table(table)
	var names []string
	for i, col := range tbl.Columns() {
		if i/8 < len(bitmap) && bitmap[i/8]&(1<<(i%8)) != 0 {
			names = append(names, col.Name)
		}
	}
	return names
}

// decodeRow decodes a full row of a table into column name → Go value.
func decodeRow(t *testing.T, c *sspclient.Client, table string, b []byte) map[string]any {
	t.Helper()
	tbl, _ := c.Schema().Table(table)
	vals, err := tbl.RowCodec().DecodeRow(b)
	if err != nil {
		t.Fatalf("decode row: %v", err)
	}
	return sspclient.Row{Values: vals}.Map(tbl)
}

// statusOf names a push status for messages.
func statusOf(o sspclient.Outcome) string {
	if o.Status == 0 {
		return "dropped(" + o.Dropped + ")"
	}
	return o.Status.String() + " " + o.ErrorCode()
}
