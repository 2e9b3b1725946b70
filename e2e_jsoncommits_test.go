package syncgo_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/validate"
	"github.com/syncgo/syncgo/wire"
)

// POST /commits (JSON writes) over real HTTP on both drivers: the same
// push as /sync, its results as JSON, and every refusal before anything
// is written.

type jsonCommitsAnswer struct {
	Commits []struct {
		ClientCommitID string `json:"clientCommitId"`
		Status         string `json:"status"`
		CommitSeq      int64  `json:"commitSeq"`
		Results        []struct {
			OpIndex         int             `json:"opIndex"`
			Status          string          `json:"status"`
			Code            string          `json:"code"`
			ServerVersion   int64           `json:"serverVersion"`
			ServerRow       json.RawMessage `json:"serverRow"`
			ConflictColumns []string        `json:"conflictColumns"`
			Details         json.RawMessage `json:"details"`
		} `json:"results"`
	} `json:"commits"`
	Code string `json:"code"`
}

// postCommits posts body to /commits as actor ("" sends no token) and
// returns the HTTP status and the decoded answer.
func postCommits(t *testing.T, e *rtEnv, actor, contentType, body string) (int, jsonCommitsAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+"/commits", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	contentType, encoding, _ := strings.Cut(contentType, "\x00")
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	if actor != "" {
		req.Header.Set("Authorization", "Bearer "+actor)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var a jsonCommitsAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("answer %d %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, a
}

// taskJSON reads a task's stored row as the JSON export writes it, or ""
// when there is none.
func taskJSON(t *testing.T, e *rtEnv, id string) string {
	t.Helper()
	rows, err := e.store.ListRows(context.Background(), rtPartition, "tasks", nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	tbl, _ := e.schema.Table("tasks")
	for _, r := range rows {
		if r.RowID != id {
			continue
		}
		vals, err := tbl.RowCodec().DecodeRow(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tbl.AppendJSON(nil, vals)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return ""
}

func TestJSONCommits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newGrantQueryEnv(t, d.open(t), func(c *syncgo.Config) {
			c.MaxRequestBytes = 1 << 20
			c.Validators = map[string]validate.Validator{"tasks": func(_ context.Context, w *validate.Write) error {
				if w.Row != nil && w.Row["title"] == "refused" {
					return validate.Reject("app.refused", "that title is refused",
						&validate.Details{FieldPaths: []string{"title"}, Reason: "refused_title", RequiredAction: "edit_fields"})
				}
				return nil
			}}
		})
		const ct = "application/json"
		first := `{"clientId":"backend","commits":[{"clientCommitId":"c1","operations":[
			{"table":"tasks","op":"upsert","row":{"id":"t1","project_id":"p1","title":"Pay the ✓ bill","done":false,"rank":7,"notes":null}},
			{"table":"tasks","op":"upsert","row":{"id":"t2","project_id":"p1","title":"two","done":true,"rank":null,"notes":"n"}}]}]}`
		status, a := postCommits(t, e, "admin", ct, first)
		if status != http.StatusOK || len(a.Commits) != 1 || a.Commits[0].Status != "applied" || a.Commits[0].CommitSeq < 1 {
			t.Fatalf("first commit: %d %+v", status, a)
		}
		seq := a.Commits[0].CommitSeq
		if got, want := taskJSON(t, e, "t1"), `{"id":"t1","project_id":"p1","title":"Pay the ✓ bill","done":false,"rank":7,"notes":null}`; got != want {
			t.Fatalf("stored t1 %s; want %s", got, want)
		}
		// A client pulls what the JSON route wrote.
		pushOps(e.peer("admin", "adm"), "m", memberOp(t, e, "alice", "p1", false))
		if st, rows := subStatuses(e.peer("alice", "a1"), rtSub("s", -1, "p1")); st["s"] != wire.SubActive || len(rows["s"]) != 2 {
			t.Fatalf("alice's pull: %v %v", st["s"], rows["s"])
		}

		// The same commit again: cached, same commitSeq, nothing written.
		if status, a := postCommits(t, e, "admin", ct, first); status != http.StatusOK || a.Commits[0].Status != "cached" || a.Commits[0].CommitSeq != seq {
			t.Fatalf("retry: %d %+v; want cached at %d", status, a, seq)
		}

		// A lost insert (baseVersion 0 on an existing row) is a conflict
		// with the server's row; an update without a base applies; a
		// delete of the other row applies.
		status, a = postCommits(t, e, "admin", ct, `{"clientId":"backend","commits":[
			{"clientCommitId":"c2","operations":[{"table":"tasks","op":"upsert","baseVersion":0,"row":{"id":"t1","project_id":"p1","title":"x","done":true}}]},
			{"clientCommitId":"c3","operations":[{"table":"tasks","op":"upsert","rowId":"t1","row":{"id":"t1","title":"renamed"}},
				{"table":"tasks","op":"delete","rowId":"t2"}]}]}`)
		if status != http.StatusOK || len(a.Commits) != 2 {
			t.Fatalf("c2, c3: %d %+v", status, a)
		}
		c2, c3 := a.Commits[0], a.Commits[1]
		if c2.Status != "rejected" || len(c2.Results) != 1 || c2.Results[0].Status != "conflict" || c2.Results[0].ServerVersion < 1 ||
			!strings.Contains(string(c2.Results[0].ServerRow), `"title":"Pay the ✓ bill"`) || len(c2.Results[0].ConflictColumns) == 0 {
			t.Fatalf("c2: %+v; want a conflict with the server's row", c2)
		}
		if c3.Status != "applied" || c3.CommitSeq <= seq {
			t.Fatalf("c3: %+v", c3)
		}
		if got := taskJSON(t, e, "t1"); !strings.Contains(got, `"title":"renamed"`) || !strings.Contains(got, `"rank":7`) {
			t.Fatalf("t1 after a partial upsert: %s", got)
		}
		if got := taskJSON(t, e, "t2"); got != "" {
			t.Fatalf("t2 after its delete: %s", got)
		}

		// A validator's rejection carries its details (§6.3.1).
		status, a = postCommits(t, e, "admin", ct, `{"clientId":"backend","commits":[{"clientCommitId":"v1","operations":[
			{"table":"tasks","op":"upsert","row":{"id":"t1","title":"refused"}}]}]}`)
		if status != http.StatusOK || a.Commits[0].Status != "rejected" || a.Commits[0].Results[0].Code != "app.refused" ||
			!strings.Contains(string(a.Commits[0].Results[0].Details), `"reason":"refused_title"`) {
			t.Fatalf("a validator's rejection: %d %+v", status, a)
		}

		// A gzip body (the first commit again: cached).
		if status, a := postCommits(t, e, "admin", ct+"\x00gzip", gzipped(t, first)); status != http.StatusOK || a.Commits[0].Status != "cached" {
			t.Fatalf("gzip body: %d %+v", status, a)
		}

		// Writes are authorized by the caller's scopes: bob is no member of p1.
		if status, a := postCommits(t, e, "bob", ct, `{"clientId":"bob-backend","commits":[{"clientCommitId":"b1","operations":[
			{"table":"tasks","op":"upsert","row":{"id":"b1","project_id":"p1","title":"t","done":false,"rank":null,"notes":null}}]}]}`); status != http.StatusOK ||
			a.Commits[0].Status != "rejected" || a.Commits[0].Results[0].Code != "sync.forbidden" {
			t.Fatalf("bob: %d %+v; want rejected sync.forbidden", status, a)
		}

		// Refusals of the whole request, none of which writes anything.
		head := func() int64 {
			p, err := e.store.Partition(context.Background(), rtPartition)
			if err != nil {
				t.Fatal(err)
			}
			return p.MaxCommitSeq
		}
		before := head()
		valid := `{"clientCommitId":"ok","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","project_id":"p1","title":"t","done":false}}]}`
		for _, c := range []struct {
			name, actor, ct, body string
			status                int
			code                  string
		}{
			{"no token", "", ct, first, 401, "sync.auth_required"},
			{"content type", "admin", "text/plain", first, 415, "sync.invalid_request"},
			{"not JSON", "admin", ct, `{"clientId":`, 400, "sync.invalid_request"},
			{"unknown field", "admin", ct, `{"clientId":"b","commits":[` + valid + `],"extra":1}`, 400, "sync.invalid_request"},
			{"two values", "admin", ct, `{"clientId":"b","commits":[` + valid + `]} {}`, 400, "sync.invalid_request"},
			{"no client", "admin", ct, `{"commits":[` + valid + `]}`, 400, "sync.invalid_request"},
			{"no commits", "admin", ct, `{"clientId":"b","commits":[]}`, 400, "sync.invalid_request"},
			{"unknown table, after a valid commit", "admin", ct, `{"clientId":"b","commits":[` + valid + `,{"clientCommitId":"x","operations":[{"table":"nope","op":"delete","rowId":"a"}]}]}`, 400, "sync.invalid_request"},
			{"wrong type", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","rank":"seven"}}]}]}`, 400, "sync.invalid_request"},
			{"fraction", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","rank":1.5}}]}]}`, 400, "sync.invalid_request"},
			{"unknown column", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","color":1}}]}]}`, 400, "sync.invalid_request"},
			{"no primary key", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"title":"z"}}]}]}`, 400, "sync.invalid_request"},
			{"rowId mismatch", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","rowId":"y","row":{"id":"z"}}]}]}`, 400, "sync.invalid_request"},
			{"delete without rowId", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"delete"}]}]}`, 400, "sync.invalid_request"},
			{"unknown op", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"merge","rowId":"z"}]}]}`, 400, "sync.invalid_request"},
			{"negative base", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"delete","rowId":"z","baseVersion":-1}]}]}`, 400, "sync.invalid_request"},
			{"reserved client", "admin", ct, `{"clientId":"[\"remote-command\",1]","commits":[` + valid + `]}`, 400, "sync.invalid_client_id"},
			{"another actor's client", "bob", ct, `{"clientId":"backend","commits":[` + valid + `]}`, 400, "sync.invalid_client_id"},
			{"too many operations", "admin", ct, `{"clientId":"b","commits":[` + strings.Repeat(valid+",", 500) + valid + `]}`, 400, "sync.too_many_operations"},
			{"too large", "admin", ct, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","notes":"` + strings.Repeat("n", 2<<20) + `"}}]}]}`, 413, "sync.invalid_request"},
			{"brotli", "admin", ct + "\x00br", first, 415, "sync.invalid_request"},
			{"not gzip", "admin", ct + "\x00gzip", first, 400, "sync.invalid_request"},
			{"gzip bomb", "admin", ct + "\x00gzip", gzipped(t, `{"clientId":"b","commits":[{"clientCommitId":"x","operations":[{"table":"tasks","op":"upsert","row":{"id":"z","notes":"`+strings.Repeat("n", 2<<20)+`"}}]}]}`), 413, "sync.invalid_request"},
		} {
			status, a := postCommits(t, e, c.actor, c.ct, c.body)
			if status != c.status || a.Code != c.code {
				t.Errorf("%s: %d %s; want %d %s", c.name, status, a.Code, c.status, c.code)
			}
		}
		if after := head(); after != before {
			t.Fatalf("refused requests moved the log from %d to %d", before, after)
		}
		if got := taskJSON(t, e, "z"); got != "" {
			t.Fatalf("a refused request wrote z: %s", got)
		}
	})
}

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
