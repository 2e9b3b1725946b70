// Package auth verifies JSON Web Tokens for syncgo and resolves an
// actor's scopes from their claims, by configuration: it is what
// `syncgo serve` runs, and an embedding server can use it as is.
//
//	a, err := auth.New(auth.Config{
//		Issuer:   "https://issuer.example",
//		Audience: []string{"syncgo"},
//		JWKSURL:  "https://issuer.example/.well-known/jwks.json",
//	}, auth.ScopeRules{
//		"project_id": {{Claim: "projects"}},
//	}, compiledSchema)
//	if err != nil { ... }
//	defer a.Close()
//	srv, err := syncgo.New(syncgo.Config{
//		Authenticate:  a.Authenticate,
//		ResolveScopes: a.ResolveScopes,
//		...
//	})
//
// Verification uses github.com/golang-jwt/jwt/v5: HS256 with a shared
// secret, RS/PS/ES/EdDSA with static PEM keys or the keys of a JWKS
// (github.com/MicahParks/jwkset: fetched at start, refreshed
// periodically and, rate-limited, when a token names an unknown key id).
// exp is required; nbf, iat, iss and aud are checked with a configurable
// clock skew. `alg: none` is never accepted, and every key verifies only
// the algorithms of its type (an RSA or JWKS key is never an HMAC
// secret), which refuses algorithm confusion.
//
// Tokens are read from the Authorization header, a cookie, a query
// parameter or the Sec-WebSocket-Protocol header, as configured. See
// docs/auth.md.
package auth
