package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
)

const testSecret = "0123456789abcdef0123456789abcdef-secret"

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testSchema(t testing.TB) *schema.Compiled {
	t.Helper()
	s, err := schema.ParseJSON([]byte(`{"version":1,"tables":[
	 {"name":"lists","primaryKey":"id","columns":[{"name":"id","type":"string","nullable":false}],
	  "scopes":[{"pattern":"list:{list_id}","column":"id"}]},
	 {"name":"notes","primaryKey":"id","columns":[{"name":"id","type":"string","nullable":false},{"name":"user_id","type":"string","nullable":false}],
	  "scopes":["user:{user_id}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := schema.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// claims returns valid claims at testNow, with overrides (a nil value
// deletes the claim).
func claims(over map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub": "alice", "iss": "https://issuer.test", "aud": "syncgo",
		"iat": testNow.Add(-time.Minute).Unix(), "exp": testNow.Add(time.Hour).Unix(),
		"lists": []string{"l1", "l2"},
	}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
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

var testRules = ScopeRules{
	"list_id": {{Claim: "lists"}, {Value: "*", When: &Condition{Claim: "role", Equals: "admin"}}},
	"user_id": {{Claim: "sub"}},
}

func newAuth(t testing.TB, cfg Config) *Authenticator {
	t.Helper()
	if cfg.Issuer == "" {
		cfg.Issuer = "https://issuer.test"
	}
	if cfg.Audience == nil {
		cfg.Audience = []string{"syncgo"}
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return testNow }
	}
	a, err := New(cfg, testRules, testSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func bearer(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/sync", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

func TestHS256Accepts(t *testing.T) {
	a := newAuth(t, Config{HS256Secret: testSecret})
	got, err := a.Authenticate(bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", claims(nil))))
	if err != nil {
		t.Fatal(err)
	}
	want := syncgo.Auth{ActorID: "alice", Partition: "default", ExpiresAt: testNow.Add(time.Hour + DefaultClockSkew).Truncate(time.Second)}
	if got.ActorID != want.ActorID || got.Partition != want.Partition || !got.ExpiresAt.Equal(want.ExpiresAt) || got.WebSocketProtocol != "" {
		t.Fatalf("auth %+v, want %+v", got, want)
	}
	scopes, err := a.ResolveScopes(context.Background(), syncgo.ScopeRequest{Partition: "default", ActorID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if s := fmtScopes(scopes); s != "list_id=l1,l2 user_id=alice" {
		t.Fatalf("scopes %s", s)
	}
}

func fmtScopes(m map[string][]string) string {
	b, _ := json.Marshal(m)
	s := strings.NewReplacer(`{`, ``, `}`, ``, `":[`, `=`, `"`, ``, `],`, ` `, `]`, ``).Replace(string(b))
	return s
}

// Every refusal of a token, and the reason it is refused for.
func TestRefusals(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaPEM := pemOf(t, &rsaKey.PublicKey)
	a := newAuth(t, Config{HS256Secret: testSecret, PublicKeys: []PublicKey{{KID: "r1", PEM: rsaPEM}}})
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", c) }
	noneToken, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	cases := []struct {
		name  string
		token string
		want  error
	}{
		{"expired", hs(claims(map[string]any{"exp": testNow.Add(-time.Minute).Unix()})), jwt.ErrTokenExpired},
		{"no exp", hs(claims(map[string]any{"exp": nil})), jwt.ErrTokenRequiredClaimMissing},
		{"not yet valid", hs(claims(map[string]any{"nbf": testNow.Add(time.Minute).Unix()})), jwt.ErrTokenNotValidYet},
		{"issued in the future", hs(claims(map[string]any{"iat": testNow.Add(time.Minute).Unix()})), jwt.ErrTokenUsedBeforeIssued},
		{"wrong issuer", hs(claims(map[string]any{"iss": "https://evil.test"})), jwt.ErrTokenInvalidIssuer},
		{"no issuer", hs(claims(map[string]any{"iss": nil})), jwt.ErrTokenRequiredClaimMissing},
		{"wrong audience", hs(claims(map[string]any{"aud": "other"})), jwt.ErrTokenInvalidAudience},
		{"no audience", hs(claims(map[string]any{"aud": nil})), jwt.ErrTokenRequiredClaimMissing},
		{"bad signature", sign(t, jwt.SigningMethodHS256, []byte(testSecret+"x"), "", claims(nil)), jwt.ErrTokenSignatureInvalid},
		{"tampered payload", tamper(hs(claims(nil))), jwt.ErrTokenSignatureInvalid},
		{"alg none", noneToken, jwt.ErrTokenSignatureInvalid},
		{"alg not accepted", sign(t, jwt.SigningMethodHS512, []byte(testSecret), "", claims(nil)), jwt.ErrTokenSignatureInvalid},
		// Algorithm confusion: an HS256 token whose secret is the RSA
		// public key's PEM: the RSA key never verifies HMAC.
		{"algorithm confusion", sign(t, jwt.SigningMethodHS256, []byte(rsaPEM), "r1", claims(nil)), jwt.ErrTokenSignatureInvalid},
		{"RSA by another key", sign(t, jwt.SigningMethodRS256, otherRSA, "r1", claims(nil)), jwt.ErrTokenSignatureInvalid},
		{"RSA unknown kid", sign(t, jwt.SigningMethodRS256, rsaKey, "r2", claims(nil)), jwt.ErrTokenUnverifiable},
		{"no actor", hs(claims(map[string]any{"sub": nil})), ErrRefused},
		{"numeric actor", hs(claims(map[string]any{"sub": 7})), ErrRefused},
		{"malformed", "abc.def", jwt.ErrTokenMalformed},
		{"too long", hs(claims(map[string]any{"pad": strings.Repeat("x", MaxTokenBytes)})), ErrRefused},
	}
	for _, c := range cases {
		_, err := a.Authenticate(bearer(c.token))
		if !errors.Is(err, ErrRefused) || !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want a refusal wrapping %v", c.name, err, c.want)
		}
	}
	// Nothing refused left a grant.
	if _, err := a.ResolveScopes(context.Background(), syncgo.ScopeRequest{Partition: "default", ActorID: "alice"}); !errors.Is(err, ErrNoGrant) {
		t.Errorf("grant after refusals only: %v", err)
	}
	// The RSA key accepts its own token.
	if _, err := a.Authenticate(bearer(sign(t, jwt.SigningMethodRS256, rsaKey, "r1", claims(nil)))); err != nil {
		t.Errorf("RS256 with the configured key: %v", err)
	}

	// Missing or unusable credentials.
	r := httptest.NewRequest(http.MethodPost, "/sync", nil)
	if _, err := a.Authenticate(r); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
	r.Header.Set("Authorization", "Basic YWxpY2U6cHc=")
	if _, err := a.Authenticate(r); !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoToken) {
		t.Errorf("basic auth: %v", err)
	}
}

func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.Replace(string(payload), `"alice"`, `"mallory"`, 1))
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

func pemOf(t testing.TB, key any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestClockSkew(t *testing.T) {
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", c) }
	for _, c := range []struct {
		skew time.Duration
		over map[string]any
		ok   bool
	}{
		{0, map[string]any{"exp": testNow.Add(-20 * time.Second).Unix()}, true}, // default 30 s
		{0, map[string]any{"exp": testNow.Add(-40 * time.Second).Unix()}, false},
		{0, map[string]any{"nbf": testNow.Add(20 * time.Second).Unix()}, true},
		{0, map[string]any{"iat": testNow.Add(20 * time.Second).Unix()}, true},
		{0, map[string]any{"nbf": testNow.Add(40 * time.Second).Unix()}, false},
		{2 * time.Minute, map[string]any{"exp": testNow.Add(-100 * time.Second).Unix()}, true},
		{-1, map[string]any{"exp": testNow.Add(-time.Second).Unix()}, false}, // no skew
		{-1, map[string]any{"nbf": testNow.Add(time.Second).Unix()}, false},
	} {
		a := newAuth(t, Config{HS256Secret: testSecret, ClockSkew: c.skew})
		got, err := a.Authenticate(bearer(hs(claims(c.over))))
		if (err == nil) != c.ok {
			t.Errorf("skew %v, claims %v: err %v, want ok=%v", c.skew, c.over, err, c.ok)
		}
		if err == nil && !got.ExpiresAt.After(testNow) {
			t.Errorf("skew %v: accepted token expires at %v, not after now", c.skew, got.ExpiresAt)
		}
	}
}

// Static keys of every supported type verify their own algorithm only.
func TestStaticKeyTypes(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, edKey, _ := ed25519.GenerateKey(rand.Reader)
	a := newAuth(t, Config{PublicKeys: []PublicKey{
		{PEM: pemOf(t, &rsaKey.PublicKey)}, {PEM: pemOf(t, &ecKey.PublicKey)}, {PEM: pemOf(t, edPub)},
	}})
	for _, c := range []struct {
		name string
		m    jwt.SigningMethod
		key  any
		ok   bool
	}{
		{"RS256", jwt.SigningMethodRS256, rsaKey, true},
		{"ES256", jwt.SigningMethodES256, ecKey, true},
		{"EdDSA", jwt.SigningMethodEdDSA, edKey, true},
		{"PS256 not in the default list", jwt.SigningMethodPS256, rsaKey, false},
		{"ES384 by an unknown key", jwt.SigningMethodES384, ec384, false},
		{"HS256 without a secret", jwt.SigningMethodHS256, []byte(testSecret), false},
	} {
		_, err := a.Authenticate(bearer(sign(t, c.m, c.key, "", claims(nil))))
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	sc := testSchema(t)
	for _, c := range []struct {
		name  string
		cfg   Config
		rules ScopeRules
		want  string
	}{
		{"no key", Config{}, nil, "no verification key"},
		{"short secret", Config{HS256Secret: "short"}, nil, "at least 32"},
		{"unknown alg", Config{HS256Secret: testSecret, Algorithms: []string{"none"}}, nil, `"none" is not accepted`},
		{"bad jwks url", Config{JWKSURL: "ftp://x"}, nil, "jwks_url"},
		{"plain http jwks", Config{JWKSURL: "http://idp.example.com/jwks.json"}, nil, "jwks_allow_http"},
		{"plain http jwks by address", Config{JWKSURL: "http://10.0.0.5:8080/jwks.json"}, nil, "jwks_allow_http"},
		{"bad pem", Config{PublicKeys: []PublicKey{{PEM: "nope"}}}, nil, "no PEM block"},
		{"private pem", Config{PublicKeys: []PublicKey{{PEM: "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"}}}, nil, "never a private key"},
		{"two-field source", Config{HS256Secret: testSecret, TokenSources: []TokenSource{{Header: "A", Cookie: "b"}}}, nil, "exactly one"},
		{"bad subprotocol", Config{HS256Secret: testSecret, TokenSources: []TokenSource{{Subprotocol: "a b"}}}, nil, "not an HTTP token"},
		{"unknown variable", Config{HS256Secret: testSecret}, ScopeRules{"org_id": {{Claim: "org"}}}, `no scope variable "org_id"`},
		{"empty rule", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{}}}, "exactly one of claim, value, values, query"},
		{"query and claim", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Claim: "a", Query: "SELECT id FROM lists"}}}, "exactly one"},
		{"query with when", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Query: "SELECT id FROM lists", When: &Condition{Claim: "r", Equals: "x"}}}}, "when does not apply"},
		{"postgres_query alone", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Claim: "a", PostgresQuery: "SELECT 1"}}}, "belong to a query rule"},
		{"query over no table", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Query: "SELECT 'x'"}}}, "scopes.list_id[0]: the SQL names no table"},
		{"query parameter", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Query: "SELECT id FROM lists WHERE id = :id"}}}, ":id"},
		{"two sources in a rule", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Claim: "a", Value: "b"}}}, "exactly one"},
		{"half condition", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Value: "*", When: &Condition{Claim: "role"}}}}, "when"},
		{"empty values", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Values: []string{}}}}, "values is empty"},
		{"bad constant", Config{HS256Secret: testSecret}, ScopeRules{"list_id": {{Values: []string{"a\x00"}}}}, "NUL"},
	} {
		_, err := Check(c.cfg, c.rules, sc)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), testSecret) {
			t.Errorf("%s: the error prints the secret", c.name)
		}
	}
}

func TestScopeRules(t *testing.T) {
	sc := testSchema(t)
	s, err := CompileScopes(ScopeRules{
		"list_id": {
			{Claim: "lists"},
			{Claim: "app.extra_lists"},
			{Value: "public"},
			{Value: "*", When: &Condition{Claim: "roles", Equals: "admin"}},
		},
	}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Unruled(sc); len(got) != 1 || got[0] != "user_id" {
		t.Errorf("unruled %v", got)
	}
	for _, c := range []struct {
		claims string
		want   string
	}{
		{`{"lists":["b","a","b"]}`, "list_id=a,b,public"},
		{`{"lists":"solo"}`, "list_id=public,solo"},
		{`{"lists":[1,2.5,true,["nested"],{"o":1}]}`, "list_id=1,2.5,public,true"},
		// A "*" in a claim is data, never a wildcard.
		{`{"lists":["*","x"]}`, "list_id=public,x"},
		{`{"app":{"extra_lists":["n1"]}}`, "list_id=n1,public"},
		{`{"roles":["user","admin"],"lists":["a"]}`, "list_id=*"},
		{`{"roles":"admin"}`, "list_id=*"},
		{`{"roles":"administrator"}`, "list_id=public"},
	} {
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(c.claims))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if got := fmtScopes(s.Resolve(m)); got != c.want {
			t.Errorf("claims %s: %s, want %s", c.claims, got, c.want)
		}
	}
	// A query rule is not resolved from claims: it is a grant query.
	s3, err := CompileScopes(ScopeRules{"list_id": {{Claim: "lists"}, {Query: "SELECT id FROM lists WHERE id = :actor", MaxValues: 5}}}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmtScopes(s3.Resolve(map[string]any{"lists": []any{"a"}})); got != "list_id=a" {
		t.Errorf("with a query rule: %s, want list_id=a", got)
	}
	if q := s3.GrantQueries(); len(q) != 1 || q[0].Variable != "list_id" || q[0].MaxValues != 5 || !strings.Contains(q[0].SQL, ":actor") {
		t.Errorf("grant queries %+v", q)
	}
	// No rule applies: the variable is absent, never allowed.
	s2, _ := CompileScopes(ScopeRules{"list_id": {{Claim: "lists"}}}, sc)
	if got := s2.Resolve(map[string]any{"sub": "a"}); len(got) != 0 {
		t.Errorf("no claim: %v, want nothing", got)
	}
}

// ResolveScopes fails closed: no token seen, token expired; a later
// token of the actor narrows its scopes, an earlier one does not widen
// them back.
func TestGrants(t *testing.T) {
	now := testNow
	a := newAuth(t, Config{HS256Secret: testSecret, Now: func() time.Time { return now }})
	q := syncgo.ScopeRequest{Partition: "default", ActorID: "alice", ClientID: "c1"}
	if _, err := a.ResolveScopes(context.Background(), q); !errors.Is(err, ErrNoGrant) {
		t.Fatalf("no token: %v", err)
	}
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", c) }
	old := hs(claims(map[string]any{"iat": testNow.Add(-time.Hour).Unix(), "lists": []string{"l1", "l2"}}))
	newer := hs(claims(map[string]any{"iat": testNow.Add(-time.Minute).Unix(), "lists": []string{"l1"}}))
	for _, tok := range []string{old, newer, old} {
		if _, err := a.Authenticate(bearer(tok)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.ResolveScopes(context.Background(), q)
	if err != nil || fmtScopes(got) != "list_id=l1 user_id=alice" {
		t.Fatalf("after old, newer, old: %v %v; want the newer token's scopes", got, err)
	}
	// A token without iat (an older one, or one of an issuer that sets
	// none) does not count as issued when it was verified: it does not
	// replace the grant of a token that says it was issued later. Its
	// nbf, when it has one, stands for its iat.
	wide := map[string]any{"iat": nil, "lists": []string{"l1", "l2", "l3"}}
	noIat := hs(claims(wide))
	wide["nbf"] = testNow.Add(-2 * time.Hour).Unix()
	oldNbf := hs(claims(wide))
	for _, tok := range []string{noIat, oldNbf} {
		if _, err := a.Authenticate(bearer(tok)); err != nil {
			t.Fatal(err)
		}
		if got, err := a.ResolveScopes(context.Background(), q); err != nil || fmtScopes(got) != "list_id=l1 user_id=alice" {
			t.Fatalf("after a token without iat: %v %v; want the newer token's scopes still", got, err)
		}
	}
	// Among tokens of an issuer that sets neither, the last accepted
	// decides.
	b := newAuth(t, Config{HS256Secret: testSecret, Now: func() time.Time { return now }})
	narrow := hs(claims(map[string]any{"iat": nil, "lists": []string{"l2"}}))
	for _, tok := range []string{noIat, narrow} {
		if _, err := b.Authenticate(bearer(tok)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := b.ResolveScopes(context.Background(), q); err != nil || fmtScopes(got) != "list_id=l2 user_id=alice" {
		t.Fatalf("tokens without iat, the narrower last: %v %v; want its scopes", got, err)
	}
	// Another actor, another partition: nothing.
	if _, err := a.ResolveScopes(context.Background(), syncgo.ScopeRequest{Partition: "other", ActorID: "alice"}); !errors.Is(err, ErrNoGrant) {
		t.Errorf("other partition: %v", err)
	}
	// Past the token's expiry (and the skew): refused.
	now = testNow.Add(time.Hour + DefaultClockSkew)
	if _, err := a.ResolveScopes(context.Background(), q); !errors.Is(err, ErrNoGrant) {
		t.Errorf("expired: %v", err)
	}
}

func TestPartitionClaim(t *testing.T) {
	a := newAuth(t, Config{HS256Secret: testSecret, PartitionClaim: "org", ActorClaim: "uid"})
	hs := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", c) }
	got, err := a.Authenticate(bearer(hs(claims(map[string]any{"org": "acme", "uid": "u7"}))))
	if err != nil || got.Partition != "acme" || got.ActorID != "u7" {
		t.Fatalf("auth %+v %v", got, err)
	}
	if _, err := a.Authenticate(bearer(hs(claims(map[string]any{"uid": "u7"})))); !errors.Is(err, ErrRefused) {
		t.Errorf("no partition claim: %v", err)
	}
}

func TestTokenSources(t *testing.T) {
	a := newAuth(t, Config{HS256Secret: testSecret, TokenSources: []TokenSource{
		{Header: "Authorization"}, {Cookie: "sg_token"}, {Query: "access_token"}, {Subprotocol: "syncgo.bearer"},
	}})
	tok := sign(t, jwt.SigningMethodHS256, []byte(testSecret), "", claims(nil))

	r := httptest.NewRequest(http.MethodGet, "/realtime?clientId=c", nil)
	r.AddCookie(&http.Cookie{Name: "sg_token", Value: tok})
	if got, err := a.Authenticate(r); err != nil || got.ActorID != "alice" || got.WebSocketProtocol != "" {
		t.Errorf("cookie: %+v %v", got, err)
	}
	r = httptest.NewRequest(http.MethodGet, "/realtime?clientId=c&access_token="+tok, nil)
	if got, err := a.Authenticate(r); err != nil || got.ActorID != "alice" {
		t.Errorf("query: %+v %v", got, err)
	}
	r = httptest.NewRequest(http.MethodGet, "/realtime?clientId=c", nil)
	r.Header.Set("Sec-WebSocket-Protocol", "other, syncgo.bearer, "+tok)
	if got, err := a.Authenticate(r); err != nil || got.ActorID != "alice" || got.WebSocketProtocol != "syncgo.bearer" {
		t.Errorf("subprotocol: %+v %v", got, err)
	}
	// A cookie authenticates a socket that also offered the marker: the
	// marker is still answered.
	rc := httptest.NewRequest(http.MethodGet, "/realtime?clientId=c", nil)
	rc.AddCookie(&http.Cookie{Name: "sg_token", Value: tok})
	rc.Header.Set("Sec-WebSocket-Protocol", "syncgo.bearer, "+tok)
	if got, err := a.Authenticate(rc); err != nil || got.WebSocketProtocol != "syncgo.bearer" {
		t.Errorf("cookie and subprotocol: %+v %v", got, err)
	}
	r.Header.Set("Sec-WebSocket-Protocol", "syncgo.bearer")
	if _, err := a.Authenticate(r); !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoToken) {
		t.Errorf("subprotocol marker without a token: %v", err)
	}
	// The first source present decides: a bad header is not rescued by
	// a good cookie.
	r = httptest.NewRequest(http.MethodGet, "/realtime?clientId=c", nil)
	r.Header.Set("Authorization", "Bearer "+tamper(tok))
	r.AddCookie(&http.Cookie{Name: "sg_token", Value: tok})
	if _, err := a.Authenticate(r); !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		t.Errorf("bad header, good cookie: %v", err)
	}
	// Only the configured sources: the default is the Authorization
	// header alone.
	b := newAuth(t, Config{HS256Secret: testSecret})
	r = httptest.NewRequest(http.MethodGet, "/realtime?clientId=c&access_token="+tok, nil)
	r.AddCookie(&http.Cookie{Name: "sg_token", Value: tok})
	if _, err := b.Authenticate(r); !errors.Is(err, ErrNoToken) {
		t.Errorf("unconfigured sources: %v", err)
	}
}

// jwksServer serves a key set that the test can replace, and counts
// fetches.
type jwksServer struct {
	*httptest.Server
	body    atomic.Value
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.body.Load().([]byte))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(t *testing.T, keys map[string]any) {
	t.Helper()
	set := jwkset.NewMemoryStorage()
	for kid, k := range keys {
		j, err := jwkset.NewJWKFromKey(k, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		if err := set.KeyWrite(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	b, err := set.JSONPublic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.body.Store([]byte(b))
}

// A JWKS rotation is picked up on the first token of the new key; the
// old key is gone after it; unknown key ids refetch at most once per
// JWKSMinRefresh; an "oct" key of the set is never an HMAC secret.
func TestJWKSRotation(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srv := newJWKSServer(t)
	srv.serve(t, map[string]any{"k1": &k1.PublicKey})
	a := newAuth(t, Config{JWKSURL: srv.URL, JWKSMinRefresh: time.Hour, HTTPClient: srv.Client()})
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	t1 := sign(t, jwt.SigningMethodRS256, k1, "k1", claims(nil))
	if _, err := a.Authenticate(bearer(t1)); err != nil {
		t.Fatalf("k1: %v", err)
	}
	// Rotate: k2 replaces k1.
	srv.serve(t, map[string]any{"k2": &k2.PublicKey})
	t2 := sign(t, jwt.SigningMethodES256, k2, "k2", claims(nil))
	if _, err := a.Authenticate(bearer(t2)); err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after the rotation, want 2", n)
	}
	if _, err := a.Authenticate(bearer(t1)); !errors.Is(err, ErrRefused) {
		t.Errorf("k1 after rotation: %v", err)
	}
	// Unknown kids: the refresh budget is spent; no further fetch.
	for i := range 5 {
		tok := sign(t, jwt.SigningMethodRS256, k1, "unknown"+string(rune('a'+i)), claims(nil))
		if _, err := a.Authenticate(bearer(tok)); !errors.Is(err, ErrRefused) {
			t.Errorf("unknown kid: %v", err)
		}
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Errorf("%d fetches after unknown kids within the rate limit, want 2", n)
	}
	// An HS256 token naming a kid, signed with a key's bytes: refused.
	if _, err := a.Authenticate(bearer(sign(t, jwt.SigningMethodHS256, []byte(testSecret), "k2", claims(nil)))); !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
		t.Errorf("HS256 against a JWKS: %v", err)
	}
}

// A symmetric key published in a JWKS never verifies anything.
func TestJWKSOctKeyIgnored(t *testing.T) {
	srv := newJWKSServer(t)
	secret := []byte(testSecret)
	srv.body.Store([]byte(`{"keys":[{"kty":"oct","kid":"o1","k":"` + base64.RawURLEncoding.EncodeToString(secret) + `"}]}`))
	a := newAuth(t, Config{JWKSURL: srv.URL, HS256Secret: strings.Repeat("s", 40), HTTPClient: srv.Client()})
	if _, err := a.Authenticate(bearer(sign(t, jwt.SigningMethodHS256, secret, "o1", claims(nil)))); !errors.Is(err, ErrRefused) {
		t.Errorf("HS256 with a JWKS oct key: %v", err)
	}
}

// The JWKS unreachable at start: tokens are refused, then accepted once
// the endpoint answers (an unknown-kid refetch).
func TestJWKSUnreachableAtStart(t *testing.T) {
	k1, _ := rsa.GenerateKey(rand.Reader, 2048)
	var up atomic.Bool
	srv := newJWKSServer(t)
	srv.serve(t, map[string]any{"k1": &k1.PublicKey})
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.fetches.Add(1)
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(srv.body.Load().([]byte))
	})
	a := newAuth(t, Config{JWKSURL: srv.URL, JWKSMinRefresh: time.Millisecond, HTTPClient: srv.Client()})
	tok := sign(t, jwt.SigningMethodRS256, k1, "k1", claims(nil))
	if _, err := a.Authenticate(bearer(tok)); !errors.Is(err, ErrRefused) {
		t.Fatalf("JWKS down: %v", err)
	}
	up.Store(true)
	time.Sleep(5 * time.Millisecond)
	if _, err := a.Authenticate(bearer(tok)); err != nil {
		t.Fatalf("JWKS up again: %v", err)
	}
}

// Whatever the claims, Resolve grants a wildcard only through a constant
// rule, and only values the wire can carry.
func FuzzScopesResolve(f *testing.F) {
	f.Add(`{"lists":["a","*",1,{"x":1}],"role":"admin","app":{"extra":["b"]}}`)
	f.Add(`{"lists":"*"}`)
	sc := testSchema(f)
	withWildcard, err := CompileScopes(ScopeRules{
		"list_id": {{Claim: "lists"}, {Claim: "app.extra"}, {Value: "*", When: &Condition{Claim: "role", Equals: "admin"}}},
		"user_id": {{Claim: "sub"}},
	}, sc)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var claims map[string]any
		d := json.NewDecoder(strings.NewReader(raw))
		d.UseNumber()
		if d.Decode(&claims) != nil {
			return
		}
		got := withWildcard.Resolve(claims)
		for v, vals := range got {
			for _, x := range vals {
				if x == "*" && (v != "list_id" || !holds(claims, Condition{Claim: "role", Equals: "admin"})) {
					t.Fatalf("wildcard for %s from claims %s", v, raw)
				}
				if x != "*" && valueProblem(x) != "" {
					t.Fatalf("unusable value %q from claims %s", x, raw)
				}
			}
			if len(vals) == 0 {
				t.Fatalf("empty value list for %s", v)
			}
		}
	})
}

// TestJWKSURLTransport: a plain http key set is accepted from this
// machine (a sidecar, a test issuer) or with jwks_allow_http; elsewhere
// https is required (TestConfigErrors).
func TestJWKSURLTransport(t *testing.T) {
	sc := testSchema(t)
	for _, cfg := range []Config{
		{JWKSURL: "https://idp.example.com/jwks.json"},
		{JWKSURL: "http://localhost:8080/jwks.json"},
		{JWKSURL: "http://127.0.0.1:8080/jwks.json"},
		{JWKSURL: "http://[::1]:8080/jwks.json"},
		{JWKSURL: "http://keycloak:8080/jwks.json", JWKSAllowHTTP: true},
	} {
		if _, err := Check(cfg, nil, sc); err != nil {
			t.Errorf("%+v: %v", cfg.JWKSURL, err)
		}
	}
}
