package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
)

// Errors of Authenticate and Verify. Every refusal wraps ErrRefused;
// syncgo answers each with 401 sync.auth_required.
var (
	// ErrRefused is wrapped by every refusal.
	ErrRefused = errors.New("auth: refused")
	// ErrNoToken: no configured token source is present in the request.
	ErrNoToken = fmt.Errorf("%w: no token", ErrRefused)
	// ErrNoGrant: ResolveScopes has no grant for the actor (no valid
	// token of it seen, or it expired or was evicted).
	ErrNoGrant = errors.New("auth: no current grant for the actor")
)

// Identity is what a verified token says.
type Identity struct {
	ActorID   string
	Partition string
	// ExpiresAt is the token's exp plus the clock skew: when it stops
	// being accepted.
	ExpiresAt time.Time
	// IssuedAt is the token's iat, else its nbf, else the zero time: a
	// token that says nothing of when it was issued is older than any
	// that does.
	IssuedAt time.Time
	// Claims are the token's claims (numbers as json.Number).
	Claims map[string]any
}

// Authenticator verifies JWTs and resolves an actor's scopes from the
// claims of its latest token: its Authenticate and ResolveScopes are a
// syncgo.Config's.
//
// The scopes of an actor are resolved from its token when Authenticate
// accepts it, and kept, per partition and actor, until that token
// expires: ResolveScopes (called with only the partition and actor, also
// for open sockets, between requests) answers from them, and fails
// closed (ErrNoGrant) when it has none. When several valid tokens of an
// actor are in use, the one issued last (iat) decides its scopes.
type Authenticator struct {
	cfg     Config
	keys    keySet
	parser  *jwt.Parser
	scopes  *Scopes
	sources []TokenSource
	algs    []string
	cancel  context.CancelFunc

	mu     sync.Mutex // orders replacements in grants
	grants *lru.Cache[grantKey, grant]
}

type grantKey struct{ partition, actor string }

type grant struct {
	scopes  map[string][]string
	issued  time.Time
	expires time.Time
}

// Check validates cfg and rules against the schema and loads the static
// keys and secret files, without contacting a JWKS. It returns the
// compiled scope rules.
func Check(cfg Config, rules ScopeRules, sc *schema.Compiled) (*Scopes, error) {
	_, _, scopes, err := prepare(cfg.withDefaults(), rules, sc)
	return scopes, err
}

func prepare(cfg Config, rules ScopeRules, sc *schema.Compiled) (keySet, []string, *Scopes, error) {
	var ks keySet
	errs := []error{cfg.validate()}
	secret := cfg.HS256Secret
	if cfg.HS256SecretFile != "" {
		s, err := readSecretFile(cfg.HS256SecretFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("hs256_secret_file: %w", err))
		}
		secret = s
	}
	if secret != "" || cfg.HS256SecretFile != "" {
		if len(secret) < MinHS256SecretBytes {
			errs = append(errs, fmt.Errorf("the HS256 secret has %d bytes: at least %d are needed", len(secret), MinHS256SecretBytes))
		}
		ks.hmac = []byte(secret)
	}
	algs := slices.Clone(cfg.Algorithms)
	defaults := len(algs) == 0
	if defaults && ks.hmac != nil {
		algs = append(algs, "HS256")
	}
	for i, k := range cfg.PublicKeys {
		data := k.PEM
		if k.PEMFile != "" {
			var err error
			if data, err = readSecretFile(k.PEMFile); err != nil {
				errs = append(errs, fmt.Errorf("public_keys[%d]: %w", i, err))
				continue
			}
		}
		key, err := parsePublicKey(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("public_keys[%d]: %w", i, err))
			continue
		}
		ks.static = append(ks.static, staticKey{kid: k.KID, key: key})
		if defaults {
			algs = append(algs, defaultAlgorithm(key))
		}
	}
	if defaults && cfg.JWKSURL != "" {
		algs = append(algs, asymmetricAlgorithms...)
	}
	slices.Sort(algs)
	algs = slices.Compact(algs)
	if ks.hmac == nil && slices.ContainsFunc(algs, func(a string) bool { return strings.HasPrefix(a, "HS") }) {
		errs = append(errs, errors.New("algorithms: an HS algorithm needs hs256_secret"))
	}
	scopes, err := CompileScopes(rules, sc)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return keySet{}, nil, nil, err
	}
	return ks, algs, scopes, nil
}

// New returns an Authenticator of cfg whose ResolveScopes applies rules,
// compiled against sc. With a JWKS URL it fetches the key set (a failure
// is logged: tokens are refused until a fetch succeeds) and refreshes it
// until Close.
func New(cfg Config, rules ScopeRules, sc *schema.Compiled) (*Authenticator, error) {
	cfg = cfg.withDefaults()
	ks, algs, scopes, err := prepare(cfg, rules, sc)
	if err != nil {
		return nil, err
	}
	grants, err := lru.New[grantKey, grant](cfg.GrantCacheSize)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.JWKSURL != "" {
		if ks.jwks, err = newJWKS(ctx, cfg); err != nil {
			cancel()
			return nil, err
		}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(algs),
		jwt.WithLeeway(cfg.ClockSkew),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithJSONNumber(),
		jwt.WithTimeFunc(cfg.Now),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if len(cfg.Audience) > 0 {
		opts = append(opts, jwt.WithAudience(cfg.Audience...))
	}
	return &Authenticator{
		cfg: cfg, keys: ks, parser: jwt.NewParser(opts...), scopes: scopes,
		sources: cfg.TokenSources, algs: algs, cancel: cancel, grants: grants,
	}, nil
}

// Close stops the JWKS refresh.
func (a *Authenticator) Close() { a.cancel() }

// Algorithms lists the accepted algorithms.
func (a *Authenticator) Algorithms() []string { return slices.Clone(a.algs) }

// Verify checks a token (signature, algorithm, exp, nbf, iat, iss, aud)
// and maps it to an identity.
func (a *Authenticator) Verify(ctx context.Context, token string) (Identity, error) {
	if len(token) > MaxTokenBytes {
		return Identity{}, fmt.Errorf("%w: token longer than %d bytes", ErrRefused, MaxTokenBytes)
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(token, claims, a.keys.keyfunc(ctx)); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	id := Identity{Claims: claims, Partition: a.cfg.Partition}
	actor, ok := lookupClaim(claims, a.cfg.ActorClaim).(string)
	if !ok || valueProblem(actor) != "" {
		return Identity{}, fmt.Errorf("%w: claim %q is not a usable actor id", ErrRefused, a.cfg.ActorClaim)
	}
	id.ActorID = actor
	if a.cfg.PartitionClaim != "" {
		p, ok := lookupClaim(claims, a.cfg.PartitionClaim).(string)
		if !ok || valueProblem(p) != "" {
			return Identity{}, fmt.Errorf("%w: claim %q is not a usable partition", ErrRefused, a.cfg.PartitionClaim)
		}
		id.Partition = p
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return Identity{}, fmt.Errorf("%w: no usable exp", ErrRefused)
	}
	id.ExpiresAt = exp.Add(a.cfg.ClockSkew)
	if iat, err := claims.GetIssuedAt(); err == nil && iat != nil {
		id.IssuedAt = iat.Time
	} else if nbf, err := claims.GetNotBefore(); err == nil && nbf != nil {
		id.IssuedAt = nbf.Time
	}
	return id, nil
}

// Token finds the request's token in the configured sources. It returns
// the WebSocket subprotocol to answer the upgrade with when the token
// came in Sec-WebSocket-Protocol.
func (a *Authenticator) Token(r *http.Request) (token, subprotocol string, src TokenSource, err error) {
	for _, s := range a.sources {
		switch {
		case s.Header != "":
			v := r.Header.Get(s.Header)
			if v == "" {
				continue
			}
			scheme, rest, ok := strings.Cut(v, " ")
			switch {
			case ok && strings.EqualFold(scheme, "Bearer"):
				v = strings.TrimSpace(rest)
			case strings.EqualFold(s.Header, "Authorization"):
				return "", "", s, fmt.Errorf("%w: the Authorization header is not a Bearer token", ErrRefused)
			}
			return v, "", s, nil
		case s.Cookie != "":
			c, err := r.Cookie(s.Cookie)
			if err != nil || c.Value == "" {
				continue
			}
			return c.Value, "", s, nil
		case s.Query != "":
			if v := r.URL.Query().Get(s.Query); v != "" {
				return v, "", s, nil
			}
		case s.Subprotocol != "":
			offered := offeredProtocols(r)
			i := slices.Index(offered, s.Subprotocol)
			if i < 0 {
				continue
			}
			if i+1 >= len(offered) {
				return "", "", s, fmt.Errorf("%w: subprotocol %s offered without a token after it", ErrRefused, s.Subprotocol)
			}
			return offered[i+1], s.Subprotocol, s, nil
		}
	}
	return "", "", TokenSource{}, ErrNoToken
}

// offeredMarker returns a configured subprotocol marker the request
// offers, or "".
func (a *Authenticator) offeredMarker(r *http.Request) string {
	offered := offeredProtocols(r)
	for _, s := range a.sources {
		if s.Subprotocol != "" && slices.Contains(offered, s.Subprotocol) {
			return s.Subprotocol
		}
	}
	return ""
}

// offeredProtocols lists the subprotocols of Sec-WebSocket-Protocol.
func offeredProtocols(r *http.Request) []string {
	var out []string
	for _, line := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(line, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// Authenticate is a syncgo.Config.Authenticate: it verifies the
// request's token, records the scopes its claims grant for
// ResolveScopes, and returns the actor, its partition and the token's
// expiry (open sockets are closed then).
func (a *Authenticator) Authenticate(r *http.Request) (syncgo.Auth, error) {
	token, proto, src, err := a.Token(r)
	if err == nil {
		var id Identity
		if id, err = a.Verify(r.Context(), token); err == nil {
			a.record(id)
			if proto == "" {
				// Another source authenticated a browser that also
				// offered the marker: it still needs it answered.
				proto = a.offeredMarker(r)
			}
			return syncgo.Auth{ActorID: id.ActorID, Partition: id.Partition, ExpiresAt: id.ExpiresAt, WebSocketProtocol: proto}, nil
		}
	}
	if !errors.Is(err, ErrNoToken) {
		a.cfg.Logger.Info("auth: token refused", "source", src.String(), "reason", err.Error())
	}
	return syncgo.Auth{}, err
}

// record keeps the scopes of a verified token, unless a later-issued
// token of the same actor is current.
func (a *Authenticator) record(id Identity) {
	g := grant{scopes: a.scopes.Resolve(id.Claims), issued: id.IssuedAt, expires: id.ExpiresAt}
	k := grantKey{id.Partition, id.ActorID}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.grants.Peek(k); ok && old.issued.After(g.issued) && a.cfg.Now().Before(old.expires) {
		a.grants.Get(k) // recently used
		return
	}
	a.grants.Add(k, g)
}

// ResolveScopes is a syncgo.Config.ResolveScopes: the scopes granted by
// the actor's current token. It fails closed (ErrNoGrant) when no
// unexpired token of the actor was verified by this Authenticator.
func (a *Authenticator) ResolveScopes(_ context.Context, q syncgo.ScopeRequest) (map[string][]string, error) {
	g, ok := a.grants.Get(grantKey{q.Partition, q.ActorID})
	if !ok || !a.cfg.Now().Before(g.expires) {
		return nil, ErrNoGrant
	}
	out := make(map[string][]string, len(g.scopes))
	for k, v := range g.scopes {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

// Scopes returns the compiled scope rules.
func (a *Authenticator) Scopes() *Scopes { return a.scopes }
