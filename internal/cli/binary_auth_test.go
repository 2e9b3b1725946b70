package cli_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/golang-jwt/jwt/v5"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/pgtest"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

// End-to-end tests of `syncgo serve` with JWT authentication: the binary
// is built, started as a process with a config file, and spoken to over
// real HTTP and WebSocket.

const e2eSecret = "e2e-shared-secret-0123456789abcdefghij"

func exampleSchema(t *testing.T) (*schema.Compiled, string) {
	t.Helper()
	path, err := filepath.Abs("../../examples/schema.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := schema.ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := schema.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return c, path
}

// writeConfig writes a config file for the example schema; extra is
// appended under auth:.
func writeConfig(t *testing.T, schemaPath, auth string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
db: syncgo.db
schema: %s
realtime:
  reresolve_interval: 1s
auth:
  issuer: https://issuer.test
  audience: [syncgo]
  clock_skew: 1s
%s
scopes:
  list_id:
    - claim: lists
    - value: "*"
      when: {claim: role, equals: admin}
  user_id:
    - claim: sub
`, schemaPath, auth)
	path := filepath.Join(dir, "syncgo.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// token mints a token; over overrides claims (nil deletes one).
func token(t *testing.T, m jwt.SigningMethod, key any, kid string, over map[string]any) string {
	t.Helper()
	c := jwt.MapClaims{"iss": "https://issuer.test", "aud": "syncgo", "sub": "alice",
		"iat": time.Now().Add(-time.Minute).Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hs(t *testing.T, over map[string]any) string {
	return token(t, jwt.SigningMethodHS256, []byte(e2eSecret), "", over)
}

func todo(id, list string) map[string]any {
	return map[string]any{"id": id, "list_id": list, "title": id, "done": false}
}

// refusal asserts that a /sync round with tok is refused with 401
// sync.auth_required.
func refusal(t *testing.T, base string, sc *schema.Compiled, what, tok string) {
	t.Helper()
	c, err := sspclient.New(base, tok, sc, sspclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Sync(context.Background())
	var he *sspclient.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized || he.Code() != "sync.auth_required" {
		t.Errorf("%s: %v; want 401 sync.auth_required", what, err)
	}
}

// upgradeStatus sends a WebSocket upgrade of /realtime and returns the
// status code and the answered subprotocol.
func upgradeStatus(t *testing.T, base string, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/realtime?clientId=probe", nil)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Sec-WebSocket-Protocol")
}

func TestBinaryJWT(t *testing.T) {
	bin := binarytest.Build(t)
	sc, schemaPath := exampleSchema(t)
	cfg := writeConfig(t, schemaPath, "  hs256_secret: ${E2E_JWT_SECRET}\n")
	p := binarytest.Serve(t, bin, binarytest.Options{Env: []string{"E2E_JWT_SECRET=" + e2eSecret}}, "-config", cfg)
	if !strings.Contains(p.Line, "auth jwt") {
		t.Errorf("startup line %q does not name the jwt auth", p.Line)
	}
	if strings.Contains(p.Stderr.String(), "DEVELOPMENT") {
		t.Errorf("jwt mode warns of development auth: %s", p.Stderr)
	}

	t.Run("refusals", func(t *testing.T) {
		rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
		none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": "https://issuer.test", "aud": "syncgo",
			"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(jwt.UnsafeAllowNoneSignatureType)
		for _, c := range []struct{ what, tok string }{
			{"no token", ""},
			{"expired", hs(t, map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})},
			{"not yet valid", hs(t, map[string]any{"nbf": time.Now().Add(time.Minute).Unix()})},
			{"wrong audience", hs(t, map[string]any{"aud": "billing"})},
			{"wrong issuer", hs(t, map[string]any{"iss": "https://evil.test"})},
			{"badly signed", token(t, jwt.SigningMethodHS256, []byte(e2eSecret+"!"), "", nil)},
			{"alg none", none},
			{"RS256 of an unknown key", token(t, jwt.SigningMethodRS256, rsaKey, "", nil)},
			{"development token", "alice"},
		} {
			refusal(t, p.URL, sc, c.what, c.tok)
		}
		// The upgrade is refused before it happens.
		if code, _ := upgradeStatus(t, p.URL, http.Header{"Authorization": {"Bearer " + hs(t, map[string]any{"aud": "x"})}}); code != http.StatusUnauthorized {
			t.Errorf("realtime upgrade with a wrong-audience token: %d, want 401", code)
		}
		if strings.Contains(p.Stderr.String(), e2eSecret) {
			t.Error("the server's log shows the secret")
		}
	})

	t.Run("scopes", func(t *testing.T) {
		ctx := context.Background()
		alice, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "alice", "lists": []string{"l1"}}), sc, sspclient.Options{})
		bob, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "bob", "lists": []string{"l2"}}), sc, sspclient.Options{})
		admin, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "carol", "role": "admin"}), sc, sspclient.Options{})
		// A valid JWT syncs: alice writes to her list and her notes.
		if _, err := alice.Upsert("todos", todo("a1", "l1")); err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Upsert("notes", map[string]any{"id": "n-alice", "user_id": "alice", "body": "mine"}); err != nil {
			t.Fatal(err)
		}
		// A write outside her claims is rejected.
		if _, err := alice.Upsert("todos", todo("a-in-l2", "l2")); err != nil {
			t.Fatal(err)
		}
		if _, err := bob.Upsert("todos", todo("b1", "l2")); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*sspclient.Client{alice, bob} {
			if _, err := c.SyncUntilQuiet(ctx, 20); err != nil {
				t.Fatal(err)
			}
		}
		var applied, rejected int
		for _, o := range alice.Outcomes() {
			switch o.Status {
			case wire.PushApplied:
				applied++
			case wire.PushRejected:
				rejected++
			}
		}
		if applied != 2 || rejected != 1 {
			t.Fatalf("alice's pushes: %d applied, %d rejected; want 2 and 1 (the write to l2 forbidden): %+v", applied, rejected, alice.Outcomes())
		}
		// Pull: alice asks for both lists and bob's notes, and gets only
		// what her claims allow.
		must(t, alice.Subscribe("lists", "todos", map[string][]string{"list_id": {"l1", "l2"}}))
		must(t, alice.Subscribe("bobs-notes", "notes", map[string][]string{"user_id": {"bob"}}))
		must(t, alice.Subscribe("my-notes", "notes", map[string][]string{"user_id": {"alice"}}))
		if _, err := alice.SyncUntilQuiet(ctx, 20); err != nil {
			t.Fatal(err)
		}
		if got := keys(alice.Rows("todos")); got != "a1" {
			t.Errorf("alice's todos: %s, want a1 only", got)
		}
		if got := keys(alice.Rows("notes")); got != "n-alice" {
			t.Errorf("alice's notes: %s, want n-alice only", got)
		}
		if st, _ := alice.Subscription("bobs-notes"); st.Status == wire.SubActive && len(st.Effective) > 0 {
			t.Errorf("bob's notes subscription of alice: %+v, want revoked", st)
		}
		// The admin's wildcard sees every list.
		must(t, admin.Subscribe("lists", "todos", map[string][]string{"list_id": {"l1", "l2"}}))
		if _, err := admin.SyncUntilQuiet(ctx, 20); err != nil {
			t.Fatal(err)
		}
		if got := keys(admin.Rows("todos")); got != "a1,b1" {
			t.Errorf("admin's todos: %s, want a1,b1", got)
		}

		// Realtime: alice's socket gets the rows of l1 and nothing of l2.
		rt, err := alice.DialRealtime(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		if _, err := admin.Upsert("todos", todo("c-l2", "l2")); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.SyncUntilQuiet(ctx, 20); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Upsert("todos", todo("c-l1", "l1")); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.SyncUntilQuiet(ctx, 20); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		deltas := 0
		for {
			if _, ok := alice.Row("todos", "c-l1"); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice's socket did not bring c-l1 (%d deltas)", deltas)
			}
			m, err := nextMessage(rt, time.Until(deadline))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case m.Delta != nil:
				deltas++
				if _, err := alice.ApplyDelta(m.Delta); err != nil {
					t.Fatal(err)
				}
			case m.Event != nil:
				if _, err := alice.SyncUntilQuiet(ctx, 20); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, ok := alice.Row("todos", "c-l2"); ok {
			t.Error("alice's socket delivered a row of l2")
		}
		if deltas == 0 {
			t.Log("c-l1 came by a wake-up and a pull, not a delta")
		}
	})

	t.Run("expiry closes the socket", func(t *testing.T) {
		c, _ := sspclient.New(p.URL, hs(t, map[string]any{"sub": "dave", "exp": time.Now().Add(2 * time.Second).Unix()}), sc, sspclient.Options{})
		rt, err := c.DialRealtime(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Drop()
		start := time.Now()
		for {
			if _, err := nextMessage(rt, 15*time.Second); err != nil {
				if errors.Is(err, errTimeout) {
					t.Fatal("the socket outlived its token by 15 s")
				}
				break
			}
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("socket closed after %v, before the token expired", d)
		}
	})
}

var errTimeout = errors.New("no message in time")

// nextMessage reads the socket's next message within d.
func nextMessage(rt *sspclient.Realtime, d time.Duration) (sspclient.RealtimeMessage, error) {
	type result struct {
		m   sspclient.RealtimeMessage
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := rt.Next()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-time.After(d):
		_ = rt.Drop()
		<-ch
		return sspclient.RealtimeMessage{}, errTimeout
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func keys(rows map[string]sspclient.Row) string {
	var out []string
	for k := range rows {
		out = append(out, k)
	}
	return strings.Join(sortStrings(out), ",")
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// A browser cannot set Authorization on a WebSocket: its socket
// authenticates by cookie and by subprotocol, and the upgrade answers
// the marker subprotocol (never the token), as browsers require.
func TestBinaryBrowserSocket(t *testing.T) {
	bin := binarytest.Build(t)
	sc, schemaPath := exampleSchema(t)
	cfg := writeConfig(t, schemaPath, `  hs256_secret: `+e2eSecret+`
  token_sources:
    - header: Authorization
    - cookie: sg_token
    - subprotocol: syncgo.bearer
`)
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-config", cfg)
	tok := hs(t, map[string]any{"lists": []string{"l1"}})
	// The client syncs once by header so that its subscription exists.
	c, _ := sspclient.New(p.URL, tok, sc, sspclient.Options{})
	must(t, c.Subscribe("l1", "todos", map[string][]string{"list_id": {"l1"}}))
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	wsURL := "ws" + strings.TrimPrefix(p.URL, "http") + "/realtime?clientId=" + url.QueryEscape(c.ClientID())

	// Subprotocol: new WebSocket(url, ["syncgo.bearer", token]).
	d := ws.Dialer{Protocols: []string{"syncgo.bearer", tok}}
	conn, br, hsk, err := d.Dial(context.Background(), wsURL)
	if err != nil {
		t.Fatalf("subprotocol dial: %v", err)
	}
	if hsk.Protocol != "syncgo.bearer" {
		t.Errorf("the upgrade answered subprotocol %q, want syncgo.bearer (a browser fails the connection otherwise)", hsk.Protocol)
	}
	expectHello(t, conn, br)
	conn.Close()
	// The same socket through the wire: the answer header names the
	// marker only.
	code, proto := upgradeStatus(t, p.URL, http.Header{"Sec-WebSocket-Protocol": {"syncgo.bearer, " + tok}})
	if code != http.StatusSwitchingProtocols || proto != "syncgo.bearer" {
		t.Errorf("raw upgrade by subprotocol: %d, protocol %q", code, proto)
	}

	// Cookie: the browser sends its site's cookie on the upgrade.
	d = ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Cookie": {"sg_token=" + tok}})}
	conn, br, _, err = d.Dial(context.Background(), wsURL)
	if err != nil {
		t.Fatalf("cookie dial: %v", err)
	}
	expectHello(t, conn, br)
	conn.Close()

	// Refused: the marker without a token, a bad token in a cookie, and
	// no token at all.
	for _, h := range []http.Header{
		{"Sec-WebSocket-Protocol": {"syncgo.bearer"}},
		{"Cookie": {"sg_token=" + hs(t, map[string]any{"iss": "https://evil.test"})}},
		{},
	} {
		if code, _ := upgradeStatus(t, p.URL, h); code != http.StatusUnauthorized {
			t.Errorf("upgrade with %v: %d, want 401", h, code)
		}
	}
}

func expectHello(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	var r io.Reader = conn
	if br != nil {
		r = br
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, op, err := wsutil.ReadServerData(struct {
		io.Reader
		io.Writer
	}{r, conn})
	if err != nil || op != ws.OpText {
		t.Fatalf("no hello: %v", err)
	}
	ev, err := wire.ParseServerEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ev.(wire.Hello); !ok {
		t.Fatalf("first event %T, want hello", ev)
	}
}

// A JWKS rotation is picked up by the running binary: a token of the
// new key is accepted at once (an unknown key id refetches the set), the
// old key's tokens are refused after it.
func TestBinaryJWKSRotation(t *testing.T) {
	bin := binarytest.Build(t)
	sc, schemaPath := exampleSchema(t)
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var body atomic.Value
	var fetches atomic.Int64
	serveKeys := func(kid string, key any) {
		set := jwkset.NewMemoryStorage()
		j, err := jwkset.NewJWKFromKey(key, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
		if err != nil {
			t.Fatal(err)
		}
		must(t, set.KeyWrite(context.Background(), j))
		b, err := set.JSONPublic(context.Background())
		must(t, err)
		body.Store([]byte(b))
	}
	serveKeys("k1", &k1.PublicKey)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		_, _ = w.Write(body.Load().([]byte))
	}))
	defer jwks.Close()
	cfg := writeConfig(t, schemaPath, "  jwks_url: "+jwks.URL+"\n  jwks_min_refresh: 1s\n")
	p := binarytest.Serve(t, bin, binarytest.Options{}, "-config", cfg)

	sync := func(tok string) error {
		c, _ := sspclient.New(p.URL, tok, sc, sspclient.Options{})
		_, err := c.Sync(context.Background())
		return err
	}
	t1 := token(t, jwt.SigningMethodRS256, k1, "k1", nil)
	if err := sync(t1); err != nil {
		t.Fatalf("k1 token: %v", err)
	}
	serveKeys("k2", &k2.PublicKey)
	before := fetches.Load()
	if err := sync(token(t, jwt.SigningMethodES256, k2, "k2", nil)); err != nil {
		t.Fatalf("k2 token after the rotation: %v", err)
	}
	if fetches.Load() != before+1 {
		t.Errorf("fetches %d → %d: want one refetch for the new key id", before, fetches.Load())
	}
	refusal(t, p.URL, sc, "k1 token after the rotation", t1)
}

// config check accepts the example config, refuses broken ones with a
// clear message and a nonzero exit, and never prints a DSN's password.
func TestBinaryConfigCheck(t *testing.T) {
	bin := binarytest.Build(t)
	out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", "../../examples/syncgo.yaml")
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("example config: exit %d\n%s%s", code, out, errOut)
	}
	_, schemaPath := exampleSchema(t)
	dir := t.TempDir()
	automerge := filepath.Join(dir, "automerge.json")
	must(t, os.WriteFile(automerge, []byte(`{"version": 1, "tables": [{"name": "docs", "primaryKey": "id",
		"columns": [{"name": "id", "type": "string", "nullable": false}, {"name": "org", "type": "string", "nullable": false},
			{"name": "body", "type": "crdt", "crdtType": "automerge", "nullable": true}],
		"scopes": ["org:{org}"]}]}`), 0o600))
	for _, c := range []struct{ name, body, want string }{
		{"crdt type without a merger", "schema: " + automerge + "\n", `no CRDT merger is registered for crdtType "automerge"`},
		{"unknown key", "listen: 127.0.0.1:0\nlisten_addr: x\n", "field listen_addr not found"},
		{"unknown auth key", "auth:\n  hs256_secret: " + e2eSecret + "\n  isuer: x\n", "field isuer not found"},
		{"unknown scope variable", "schema: " + schemaPath + "\nauth:\n  hs256_secret: " + e2eSecret + "\nscopes:\n  org_id:\n    - claim: org\n", `no scope variable "org_id"`},
		{"missing secret file", "auth:\n  hs256_secret_file: nowhere.txt\n", "nowhere.txt"},
		{"unset variable", "db: ${E2E_UNSET_VARIABLE}\n", "E2E_UNSET_VARIABLE is not set"},
		{"bad mode", "auth:\n  mode: basic\n", `auth.mode "basic"`},
		{"short secret", "auth:\n  hs256_secret: short\n", "at least 32"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		must(t, os.WriteFile(path, []byte(c.body), 0o600))
		out, errOut, code := binarytest.Run(t, bin, nil, "config", "check", path)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want nonzero and %q", c.name, code, errOut, c.want)
		}
		if strings.Contains(out+errOut, "short\n") && c.name == "short secret" {
			t.Errorf("%s: the secret is printed", c.name)
		}
	}
	// DSN passwords are redacted in the summary.
	path := filepath.Join(dir, "pg.yaml")
	must(t, os.WriteFile(path, []byte("db: postgres://u:pw-sekrit-1@db.test:5432/app\ndb_listen: host=db.test password='pw-sekrit-2' dbname=app\n"), 0o600))
	out, errOut, code = binarytest.Run(t, bin, nil, "config", "check", path)
	if code != 0 || !strings.Contains(out, "postgres://u:xxxxx@db.test:5432/app (Postgres)") || strings.Contains(out+errOut, "sekrit") {
		t.Errorf("pg config: exit %d\n%s%s", code, out, errOut)
	}
}

// The database DSN's password never shows: not in the startup line, not
// in the log; a key=value DSN is opened as Postgres, not as an SQLite
// file named like it.
func TestBinaryPostgresDSN(t *testing.T) {
	base := pgtest.Schema(t, "authdsn", false)
	bin := binarytest.Build(t)
	u, err := url.Parse(base)
	must(t, err)
	const password = "pw-never-printed-42"
	u.User = url.UserPassword(u.User.Username(), password)
	dir := t.TempDir()
	p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-db", u.String(), "-listen", "127.0.0.1:0")
	if !strings.Contains(p.Line, ":xxxxx@") || strings.Contains(p.Line, password) {
		t.Errorf("startup line %q: want the password redacted", p.Line)
	}
	p.Stop()
	if strings.Contains(p.Stderr.String(), password) || strings.Contains(p.Stdout.String(), password) {
		t.Errorf("the password shows in the output:\n%s\n%s", p.Stdout, p.Stderr)
	}

	// key=value, with the password quoted.
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	kv := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable search_path=%s",
		u.Hostname(), port, u.User.Username(), password, strings.TrimPrefix(u.Path, "/"), u.Query().Get("search_path"))
	p = binarytest.Serve(t, bin, binarytest.Options{Dir: dir}, "-db", kv, "-listen", "127.0.0.1:0")
	if !strings.Contains(p.Line, "password=xxxxx") || strings.Contains(p.Line, password) {
		t.Errorf("startup line %q: want the password redacted", p.Line)
	}
	c, _ := sspclient.New(p.URL, "alice", schemaDemo(t), sspclient.Options{})
	if _, err := c.Upsert("projects", map[string]any{"id": "p1", "name": "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncUntilQuiet(context.Background(), 10); err != nil {
		t.Fatalf("sync over the key=value DSN: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("serve created %s in its working directory: the DSN was taken for an SQLite path", e.Name())
	}
}

func schemaDemo(t *testing.T) *schema.Compiled {
	t.Helper()
	data, err := os.ReadFile("demo_schema.json")
	must(t, err)
	s, err := schema.ParseJSON(data)
	must(t, err)
	c, err := schema.Compile(s)
	must(t, err)
	return c
}
