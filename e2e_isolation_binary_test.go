package syncgo_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// isoSchemaJSON: tasks by project; members by user (the query rule reads
// them).
const isoSchemaJSON = `{"version": 1, "tables": [
 {"name": "tasks", "primaryKey": "id", "columns": [
   {"name": "id", "type": "string", "nullable": false},
   {"name": "project_id", "type": "string", "nullable": false},
   {"name": "title", "type": "string", "nullable": false}],
  "scopes": [{"pattern": "project:{project_id}"}]},
 {"name": "members", "primaryKey": "id", "columns": [
   {"name": "id", "type": "string", "nullable": false},
   {"name": "project_id", "type": "string", "nullable": false},
   {"name": "user_id", "type": "string", "nullable": false}],
  "scopes": [{"pattern": "user:{user_id}"}]}]}`

const isoSecret = "an-hs256-secret-of-at-least-32-bytes!"

// isoConfig: JWT (HS256, the partition from a claim), scopes from a
// claim, from the members table and, for admins, every value; a scoped
// remote query.
const isoConfig = `auth:
  hs256_secret: "` + isoSecret + `"
  partition_claim: tenant
scopes:
  project_id:
    - claim: projects
    - query: "SELECT project_id FROM members WHERE user_id = :actor"
    - value: "*"
      when: {claim: role, equals: admin}
  user_id:
    - claim: sub
    - value: "*"
      when: {claim: role, equals: admin}
operations:
  queries:
    - id: tasksOf
      sql: "SELECT id, title FROM tasks WHERE project_id = :project ORDER BY id"
      params: [{name: project, type: string}]
      columns: [{name: id, type: string}, {name: title, type: string}]
      coverage: [{table: tasks, scopes: {project_id: [":project"]}}]
      max_rows: 100
limits:
  inline_segment_max_bytes: -1
`

// isoToken mints an HS256 token for sub in tenant with extra claims.
func isoToken(t *testing.T, sub, tenant string, extra map[string]any) string {
	t.Helper()
	c := jwt.MapClaims{"sub": sub, "tenant": tenant, "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(isoSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The isolation rules through the real binary, `syncgo serve` with JWT
// auth, claim and query scope rules and a configured remote query, on
// SQLite and Postgres: two tenants hold identical row ids and scope
// values; an actor reads only its tenant's rows of its projects by pull,
// segment download, signed URL and remote query; a forged scopes header,
// another actor's signed URL and a project granted by membership in the
// other tenant reveal nothing; and a membership removed mid-watch stops
// the watch's rows.
func TestBinaryIsolationJWT(t *testing.T) {
	bin := binarytest.Build(t)
	for _, drv := range []string{"sqlite", "postgres"} {
		t.Run(drv, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, body string) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			db := filepath.Join(dir, "sync.db")
			if drv == "postgres" {
				db = pgtest.Schema(t, "syncgo_isobin", false)
			}
			schemaFile := write("schema.json", isoSchemaJSON)
			keyFile := write("url.key", "0123456789abcdef0123456789abcdef\n")
			cfgFile := write("syncgo.yaml", isoConfig)
			p := binarytest.Serve(t, bin, binarytest.Options{Name: "serve " + drv}, "-config", cfgFile, "-db", db,
				"-listen", "127.0.0.1:0", "-schema", schemaFile, "-signing-key-file", keyFile)
			ir, err := schema.ParseJSON([]byte(isoSchemaJSON))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := schema.Compile(ir)
			if err != nil {
				t.Fatal(err)
			}
			client := func(tok string, opts sspclient.Options) *sspclient.Client {
				c, err := sspclient.New(p.URL, tok, sc, opts)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			ctx := context.Background()
			// The same ids and scope values in both tenants; the titles
			// tell them apart.
			for _, tenant := range []string{"t1", "t2"} {
				admin := client(isoToken(t, "admin", tenant, map[string]any{"role": "admin"}), sspclient.Options{})
				for i := range 12 {
					for _, pr := range []string{"p1", "p2"} {
						if _, err := admin.Upsert("tasks", map[string]any{"id": fmt.Sprintf("%s-%02d", pr, i), "project_id": pr,
							"title": tenant + " " + pr}); err != nil {
							t.Fatal(err)
						}
					}
				}
				// bob is a member of p2 in t2 only.
				if tenant == "t2" {
					if _, err := admin.Upsert("members", map[string]any{"id": "m1", "project_id": "p2", "user_id": "bob"}); err != nil {
						t.Fatal(err)
					}
				}
				syncQuiet(t, admin)
			}

			// alice (t1, project p1 by claim) bootstraps p1 by reference.
			aliceTok := isoToken(t, "alice", "t1", map[string]any{"projects": []string{"p1"}})
			alice := client(aliceTok, sspclient.Options{Accept: wire.AcceptExternalRows | wire.AcceptSignedURLs, LimitSnapshotRows: 5})
			if err := alice.Subscribe("s", "tasks", map[string][]string{"project_id": {"p1"}}); err != nil {
				t.Fatal(err)
			}
			var refs []wire.SegmentRef
			for _, res := range syncQuiet(t, alice) {
				for _, s := range res.Sections {
					refs = append(refs, s.Refs...)
				}
			}
			rows := alice.Rows("tasks")
			if len(refs) == 0 || len(rows) != 12 {
				t.Fatalf("alice's bootstrap: %d refs, %d rows; want refs and 12 rows", len(refs), len(rows))
			}
			tbl, _ := sc.Table("tasks")
			for id, r := range rows {
				if m := r.Map(tbl); m["title"] != "t1 p1" {
					t.Fatalf("alice holds %s = %v, want a row of t1 p1", id, m)
				}
			}

			// A subscription of a project alice lacks is revoked.
			a2 := client(aliceTok, sspclient.Options{})
			if err := a2.Subscribe("s2", "tasks", map[string][]string{"project_id": {"p2"}}); err != nil {
				t.Fatal(err)
			}
			for _, res := range syncQuiet(t, a2) {
				for _, s := range res.Sections {
					if s.Status != wire.SubRevoked {
						t.Fatalf("alice subscribing to p2: section %+v, want revoked", s)
					}
				}
			}
			if n := len(a2.Rows("tasks")); n != 0 {
				t.Fatalf("alice got %d rows of p2", n)
			}

			// Segments: carol (t1, p2) and bob of t2 cannot take alice's.
			p1 := map[string][]string{"project_id": {"p1"}}
			carol := client(isoToken(t, "carol", "t1", map[string]any{"projects": []string{"p2"}}), sspclient.Options{})
			bobT1 := client(isoToken(t, "bob", "t1", map[string]any{"projects": []string{"p1"}}), sspclient.Options{})
			bobT2 := client(isoToken(t, "bob", "t2", nil), sspclient.Options{})
			for _, ref := range refs {
				if _, err := alice.DownloadSegment(ctx, ref.SegmentID, p1); err != nil {
					t.Fatalf("alice's own segment: %v", err)
				}
				wantHTTPError(t, "carol, p1 forged", http.StatusForbidden, syncerr.CodeForbidden, dl(carol, ref.SegmentID, p1))
				wantHTTPError(t, "carol, p1+p2 forged", http.StatusForbidden, syncerr.CodeForbidden,
					dl(carol, ref.SegmentID, map[string][]string{"project_id": {"p1", "p2"}}))
				wantHTTPError(t, "bob of t2", http.StatusNotFound, syncerr.CodeNotFound, dl(bobT2, ref.SegmentID, p1))
				if _, err := bobT1.DownloadSegment(ctx, ref.SegmentID, p1); err != nil {
					t.Fatalf("bob of t1 with p1 by claim: %v", err)
				}
				// The signed URL is the grant; moved to another segment or
				// tenant it is refused.
				if ref.URL == nil {
					t.Fatal("no signed URL")
				}
				if _, err := carol.FetchSegmentURL(ctx, *ref.URL, ref.SegmentID); err != nil {
					t.Fatalf("the signed URL by another holder: %v", err)
				}
			}
			if len(refs) > 1 {
				moved := strings.Replace(*refs[0].URL, url1(refs[0].SegmentID), url1(refs[1].SegmentID), 1)
				if _, err := carol.FetchSegmentURL(ctx, moved, refs[1].SegmentID); err == nil {
					t.Fatal("a signed URL moved to another segment was served")
				}
			}
			// The conditional path answers no 304 before authorization.
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/segments/"+refs[0].SegmentID, nil)
			req.Header.Set("Authorization", "Bearer "+isoToken(t, "carol", "t1", map[string]any{"projects": []string{"p2"}}))
			req.Header.Set("X-Syncular-Scopes", `{"project_id":["p1"]}`)
			req.Header.Set("If-None-Match", `"`+refs[0].SegmentID+`"`)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("carol's conditional GET of alice's segment: HTTP %d, want 403", resp.StatusCode)
			}

			// Remote query: tenant and scope bind it.
			env := &e2eEnv{t: t, url: p.URL}
			if got := rowIDs(t, postOp(t, env, aliceTok, query("c1", "tasksOf", project("p1")))); len(got) != 12 {
				t.Fatalf("alice's tasksOf p1: %v", got)
			}
			if c := postOp(t, env, aliceTok, query("c1", "tasksOf", project("p2"))).code(); c != "operation.forbidden" {
				t.Fatalf("alice's tasksOf p2: %q", c)
			}
			for _, v := range []string{"", "%", "_", "p%", "p1' OR '1'='1", "P1", "p1 "} {
				r := postOp(t, env, aliceTok, query("c1", "tasksOf", project(v)))
				if r.msg["kind"] == "query" && len(r.msg["rows"].([]any)) > 0 {
					t.Fatalf("alice's tasksOf %q read %v", v, r.msg["rows"])
				}
			}
			bobT2Tok := isoToken(t, "bob", "t2", nil)
			res := postOp(t, env, bobT2Tok, query("c1", "tasksOf", project("p2")))
			ids := rowIDs(t, res)
			if len(ids) != 12 || !slices.ContainsFunc(ids, func(s string) bool { return strings.HasPrefix(s, "p2-") }) {
				t.Fatalf("bob of t2 (member of p2) tasksOf p2: %v", ids)
			}
			for _, row := range res.msg["rows"].([]any) {
				if title := row.(map[string]any)["title"]; title != "t2 p2" {
					t.Fatalf("bob of t2 read %v", row)
				}
			}
			// bob's membership is of t2: in t1 he has nothing.
			bobT1NoClaim := isoToken(t, "bob", "t1", nil)
			if c := postOp(t, env, bobT1NoClaim, query("c1", "tasksOf", project("p2"))).code(); c != "operation.forbidden" {
				t.Fatalf("bob of t1 by t2's membership: %q", c)
			}

			// A watch of bob's p2 in t2 stops when the membership goes.
			w := dialWatch(t, env, bobT2Tok)
			w.watch("w", "tasksOf", project("p2"))
			if got := snapshotIDs(t, w.next()); len(got) != 12 {
				t.Fatalf("bob's first snapshot: %v", got)
			}
			admin := client(isoToken(t, "admin", "t2", map[string]any{"role": "admin"}), sspclient.Options{})
			if _, err := admin.Delete("members", "m1"); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Upsert("tasks", map[string]any{"id": "p2-new", "project_id": "p2", "title": "after removal"}); err != nil {
				t.Fatal(err)
			}
			syncQuiet(t, admin)
			for stopped := false; !stopped; {
				m := w.next() // fails the test after 15 s without a message
				if m["kind"] == "watch_error" {
					if m["code"] != "operation.forbidden" {
						t.Fatalf("bob's watch after removal: %v", m)
					}
					stopped = true
					continue
				}
				if ids := snapshotIDs(t, m); slices.Contains(ids, "p2-new") {
					t.Fatalf("bob's watch delivered a row committed after his membership was removed: %v", ids)
				}
			}
		})
	}
}

// url1 is a segment id as it appears in a URL path.
func url1(id string) string { return "/segments/" + id }
