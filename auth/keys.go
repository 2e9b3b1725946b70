package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// staticKey is a parsed PublicKey.
type staticKey struct {
	kid string
	key crypto.PublicKey
}

// parsePublicKey reads one PEM block: a PKIX public key, a PKCS#1 RSA
// public key or a certificate.
func parsePublicKey(data string) (crypto.PublicKey, error) {
	block, rest := pem.Decode([]byte(data))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, errors.New("more than one PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		return nil, fmt.Errorf("PEM block %q: want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE (never a private key)", block.Type)
	}
	if err != nil {
		return nil, err
	}
	if len(algorithmsFor(key)) == 0 {
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
	if k, ok := key.(*rsa.PublicKey); ok && k.N.BitLen() < 2048 {
		return nil, fmt.Errorf("RSA key of %d bits: at least 2048 are needed", k.N.BitLen())
	}
	return key, nil
}

// algorithmsFor lists the algorithms a public key verifies: the
// binding of a key type to its algorithms is what refuses algorithm
// confusion (an RSA key is never an HMAC secret, a P-256 key never
// verifies ES384).
func algorithmsFor(key crypto.PublicKey) []string {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return []string{"ES256"}
		case elliptic.P384():
			return []string{"ES384"}
		case elliptic.P521():
			return []string{"ES512"}
		}
	case ed25519.PublicKey:
		return []string{"EdDSA"}
	}
	return nil
}

// defaultAlgorithm is the algorithm a static key accepts when
// Config.Algorithms is not set.
func defaultAlgorithm(key crypto.PublicKey) string {
	if _, ok := key.(*rsa.PublicKey); ok {
		return "RS256"
	}
	return algorithmsFor(key)[0]
}

// publicOf returns the public half of a key a JWKS may hold whole.
func publicOf(key any) crypto.PublicKey {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return &k.PublicKey
	case *ecdsa.PrivateKey:
		return &k.PublicKey
	case ed25519.PrivateKey:
		return k.Public()
	}
	return key
}

// keySet finds the verification keys of a token: the HS256 secret,
// static keys and a JWKS.
type keySet struct {
	hmac   []byte
	static []staticKey
	jwks   jwkset.Storage
}

// newJWKS starts fetching the JWKS: a first fetch now (a failure is
// logged and the keys are fetched again on demand), a refresh every
// cfg.JWKSRefresh until ctx ends, and a refresh when a token names an
// unknown key id, at most once per cfg.JWKSMinRefresh.
func newJWKS(ctx context.Context, cfg Config) (jwkset.Storage, error) {
	shown := cfg.JWKSURL
	if u, err := url.Parse(shown); err == nil {
		shown = u.Redacted() // the user info's password, if any, as xxxxx
	}
	onError := func(ctx context.Context, err error) {
		cfg.Logger.Warn("auth: fetching the JWKS failed", "url", shown, "err", err)
	}
	st, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    cfg.HTTPClient,
		Ctx:                       ctx,
		HTTPTimeout:               10 * time.Second,
		NoErrorReturnFirstHTTPReq: true,
		RefreshErrorHandler:       onError,
		RefreshInterval:           cfg.JWKSRefresh,
	})
	if err != nil {
		return nil, err
	}
	return jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{cfg.JWKSURL: st},
		// A token of an unknown kid waits at most this long for its turn
		// to refresh the set; past it, it is refused at once rather than
		// holding a request while the rate limit runs.
		RateLimitWaitMax:  time.Second,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.JWKSMinRefresh), 1),
	})
}

// keyfunc returns the keys that may verify token t. The parser has
// already checked that t's algorithm is one of the accepted ones.
func (ks *keySet) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		alg := t.Method.Alg()
		if strings.HasPrefix(alg, "HS") {
			if ks.hmac == nil {
				return nil, fmt.Errorf("%s token but no HS256 secret is configured", alg)
			}
			return ks.hmac, nil
		}
		kid, _ := t.Header["kid"].(string)
		var keys []jwt.VerificationKey
		for _, k := range ks.static {
			if (kid == "" || k.kid == "" || k.kid == kid) && slices.Contains(algorithmsFor(k.key), alg) {
				keys = append(keys, k.key)
			}
		}
		if ks.jwks != nil {
			var found []jwkset.JWK
			if kid != "" {
				if k, err := ks.jwks.KeyRead(ctx, kid); err == nil {
					found = append(found, k)
				} else if len(keys) == 0 {
					return nil, fmt.Errorf("key id %q: %w", kid, err)
				}
			} else if all, err := ks.jwks.KeyReadAll(ctx); err == nil {
				found = all
			}
			for _, j := range found {
				if k := jwksKey(j, alg); k != nil {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("no %s key for key id %q", alg, kid)
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	}
}

// jwksKey returns the public key of a JWKS entry if it may verify alg:
// a signing key (use absent or "sig") whose declared algorithm, if any,
// is alg, of a type that verifies alg. Symmetric ("oct") keys of a JWKS
// are never used: a key set is public.
func jwksKey(j jwkset.JWK, alg string) crypto.PublicKey {
	m := j.Marshal()
	if m.USE != "" && m.USE != jwkset.UseSig {
		return nil
	}
	if m.ALG != "" && string(m.ALG) != alg {
		return nil
	}
	key := publicOf(j.Key())
	if !slices.Contains(algorithmsFor(key), alg) {
		return nil
	}
	return key
}
