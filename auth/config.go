package auth

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// Config configures JWT verification and the mapping of a verified
// token to a syncgo actor and partition. The yaml tags are the keys of
// the `auth:` section of the syncgo config file (docs/auth.md).
type Config struct {
	// Issuer, when set, is the required `iss` claim.
	Issuer string `yaml:"issuer"`
	// Audience, when set, lists the accepted audiences: the token's `aud`
	// claim must hold at least one of them.
	Audience []string `yaml:"audience"`
	// Algorithms lists the accepted `alg` header values. Default: HS256
	// when HS256Secret is set, the algorithm of each static key, and for
	// a JWKS the asymmetric algorithms RS256, RS384, RS512, PS256, PS384,
	// PS512, ES256, ES384, ES512 and EdDSA. `none` is never accepted, and
	// an HMAC algorithm only ever verifies with HS256Secret.
	Algorithms []string `yaml:"algorithms"`
	// ClockSkew is the leeway allowed on exp, nbf and iat for clocks that
	// differ between the issuer and this server. Default 30 s; negative
	// means none.
	ClockSkew time.Duration `yaml:"clock_skew"`

	// HS256Secret is the shared secret of HS256 tokens (at least 32
	// bytes). HS256SecretFile names a file holding it instead (a trailing
	// newline is dropped).
	HS256Secret     string `yaml:"hs256_secret"`
	HS256SecretFile string `yaml:"hs256_secret_file"`
	// PublicKeys are static verification keys (RSA, ECDSA P-256/384/521,
	// Ed25519), PEM-encoded.
	PublicKeys []PublicKey `yaml:"public_keys"`
	// JWKSURL is a JSON Web Key Set endpoint (for example an identity
	// provider's /.well-known/jwks.json). Its keys are fetched at start,
	// refreshed every JWKSRefresh (default 1 h), and fetched again when a
	// token names a key id not in the set, at most once per
	// JWKSMinRefresh (default 1 min).
	// It must be https, or http to a loopback host, unless JWKSAllowHTTP
	// is set: whoever can change the key set in transit can sign tokens.
	JWKSURL        string        `yaml:"jwks_url"`
	JWKSRefresh    time.Duration `yaml:"jwks_refresh"`
	JWKSMinRefresh time.Duration `yaml:"jwks_min_refresh"`
	// JWKSAllowHTTP accepts a plain http jwks_url on any host (a private
	// network whose transport is protected otherwise, as by a service
	// mesh's mutual TLS).
	JWKSAllowHTTP bool `yaml:"jwks_allow_http"`

	// ActorClaim is the claim whose (string) value is the actor id.
	// Default "sub".
	ActorClaim string `yaml:"actor_claim"`
	// PartitionClaim, when set, is the claim whose (string) value is the
	// partition; a token without it is refused. Otherwise every actor is
	// in Partition (default "default").
	PartitionClaim string `yaml:"partition_claim"`
	Partition      string `yaml:"partition"`

	// TokenSources are where a request's token is looked for, in order;
	// the first source present is used (and must hold a valid token).
	// Default: the Authorization header (Bearer).
	TokenSources []TokenSource `yaml:"token_sources"`

	// GrantCacheSize bounds the number of actors whose scopes, resolved
	// from their latest token, are kept for ResolveScopes. Default
	// 100,000.
	GrantCacheSize int `yaml:"grant_cache_size"`

	// HTTPClient fetches the JWKS. Default: a client with a 10 s timeout.
	HTTPClient *http.Client `yaml:"-"`
	// Logger receives refusals (their reason, never the token) and JWKS
	// fetch failures. Default: discard.
	Logger *slog.Logger `yaml:"-"`
	// Now is the clock. Default time.Now.
	Now func() time.Time `yaml:"-"`
}

// PublicKey is a static verification key.
type PublicKey struct {
	// KID, when set, is the key id: a token whose header names a kid is
	// verified only with the key of that id.
	KID string `yaml:"kid"`
	// PEM is the key ("-----BEGIN PUBLIC KEY-----…", or a certificate);
	// PEMFile names a file holding it instead.
	PEM     string `yaml:"pem"`
	PEMFile string `yaml:"pem_file"`
}

// TokenSource is one place a token may be carried. Exactly one field is
// set.
type TokenSource struct {
	// Header is a request header: "Authorization" carries
	// "Bearer <token>"; any other header the token itself (a "Bearer "
	// prefix is tolerated).
	Header string `yaml:"header"`
	// Cookie is a cookie name (browsers send cookies on a WebSocket
	// upgrade of their own origin).
	Cookie string `yaml:"cookie"`
	// Query is a URL query parameter. URLs end up in proxy and access
	// logs: prefer a cookie or the subprotocol.
	Query string `yaml:"query"`
	// Subprotocol is a marker WebSocket subprotocol: a browser opens
	// new WebSocket(url, [marker, token]); the token is the offered
	// protocol that follows the marker, and the server answers the
	// upgrade with the marker (never the token).
	Subprotocol string `yaml:"subprotocol"`
}

func (s TokenSource) String() string {
	switch {
	case s.Header != "":
		return "header " + s.Header
	case s.Cookie != "":
		return "cookie " + s.Cookie
	case s.Query != "":
		return "query parameter " + s.Query
	case s.Subprotocol != "":
		return "subprotocol " + s.Subprotocol
	}
	return "empty token source"
}

// Defaults of Config.
const (
	DefaultClockSkew      = 30 * time.Second
	DefaultJWKSRefresh    = time.Hour
	DefaultJWKSMinRefresh = time.Minute
	DefaultActorClaim     = "sub"
	DefaultPartition      = "default"
	DefaultGrantCacheSize = 100_000
	// MaxTokenBytes bounds a token: a longer one is refused unparsed.
	MaxTokenBytes = 16 << 10
	// MinHS256SecretBytes is the shortest HS256 secret accepted (RFC
	// 7518 §3.2: a key of the hash's size or larger).
	MinHS256SecretBytes = 32
)

// asymmetricAlgorithms are the algorithms a JWKS key may verify.
var asymmetricAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// knownAlgorithms are the algorithms Algorithms may name.
var knownAlgorithms = append([]string{"HS256", "HS384", "HS512"}, asymmetricAlgorithms...)

// Configured reports whether any verification key is configured (a
// secret, a static key or a JWKS URL).
func (c Config) Configured() bool {
	return c.HS256Secret != "" || c.HS256SecretFile != "" || len(c.PublicKeys) > 0 || c.JWKSURL != ""
}

func (c Config) withDefaults() Config {
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	} else if c.ClockSkew < 0 {
		c.ClockSkew = 0
	}
	if c.JWKSRefresh <= 0 {
		c.JWKSRefresh = DefaultJWKSRefresh
	}
	if c.JWKSMinRefresh <= 0 {
		c.JWKSMinRefresh = DefaultJWKSMinRefresh
	}
	if c.ActorClaim == "" {
		c.ActorClaim = DefaultActorClaim
	}
	if c.Partition == "" {
		c.Partition = DefaultPartition
	}
	if len(c.TokenSources) == 0 {
		c.TokenSources = []TokenSource{{Header: "Authorization"}}
	}
	if c.GrantCacheSize <= 0 {
		c.GrantCacheSize = DefaultGrantCacheSize
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate checks the settings that need no key material.
func (c Config) validate() error {
	var errs []error
	if !c.Configured() {
		errs = append(errs, errors.New("no verification key: set hs256_secret(_file), public_keys or jwks_url"))
	}
	if c.HS256Secret != "" && c.HS256SecretFile != "" {
		errs = append(errs, errors.New("hs256_secret and hs256_secret_file are both set"))
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(knownAlgorithms, a) {
			errs = append(errs, fmt.Errorf("algorithms: %q is not accepted (one of %s)", a, strings.Join(knownAlgorithms, ", ")))
		}
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			errs = append(errs, fmt.Errorf("jwks_url %q: want an http(s) URL", c.JWKSURL))
		case u.Scheme == "http" && !c.JWKSAllowHTTP && !loopbackHost(u.Hostname()):
			errs = append(errs, fmt.Errorf("jwks_url %q: plain http to a host that is not loopback lets anyone on the path replace the keys and sign tokens; use https, or set jwks_allow_http", c.JWKSURL))
		}
	}
	for i, k := range c.PublicKeys {
		if (k.PEM == "") == (k.PEMFile == "") {
			errs = append(errs, fmt.Errorf("public_keys[%d]: set exactly one of pem and pem_file", i))
		}
	}
	for i, s := range c.TokenSources {
		n := 0
		for _, v := range []string{s.Header, s.Cookie, s.Query, s.Subprotocol} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, fmt.Errorf("token_sources[%d]: set exactly one of header, cookie, query, subprotocol", i))
		}
		if s.Subprotocol != "" && !isToken(s.Subprotocol) {
			errs = append(errs, fmt.Errorf("token_sources[%d]: subprotocol %q is not an HTTP token", i, s.Subprotocol))
		}
	}
	return errors.Join(errs...)
}

// isToken reports whether s is an RFC 7230 token (a valid subprotocol
// name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// readSecretFile reads a secret or key file, dropping one trailing
// newline.
func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// loopbackHost reports whether host names this machine: localhost, or a
// loopback IP address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
