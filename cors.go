package syncgo

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/cors"

	"github.com/syncgo/syncgo/syncerr"
)

// CORSConfig lets browser applications on other origins call the protocol
// routes (Config.CORS). Preflight requests (OPTIONS with
// Access-Control-Request-Method) are answered on every route of the
// handler; a preflight from an origin not allowed is refused with 403.
// The same origin list guards the WebSocket upgrade of /realtime.
type CORSConfig struct {
	// AllowedOrigins lists the origins allowed, such as
	// "https://app.example.com". An entry may hold one "*" standing for
	// any run of characters ("https://*.example.com"); "*" alone allows
	// every origin. Origins compare case-insensitively. Required.
	AllowedOrigins []string
	// AllowedMethods are the methods a cross-origin request may use.
	// Default GET, POST, PUT (a blob upload), HEAD.
	AllowedMethods []string
	// AllowedHeaders are the request headers a cross-origin request may
	// send. Default: Authorization, Content-Type, Content-Encoding,
	// X-Syncular-Scopes, If-None-Match. "*" allows any header.
	AllowedHeaders []string
	// ExposedHeaders are the response headers a browser application may
	// read. Default: ETag, Retry-After, Content-Encoding.
	ExposedHeaders []string
	// MaxAge is how long a browser may cache a preflight answer (whole
	// seconds). Zero sends no Access-Control-Max-Age header, a negative
	// value sends 0.
	MaxAge time.Duration
	// AllowCredentials lets a browser send cookies and client
	// certificates. It cannot be combined with the "*" origin.
	AllowCredentials bool
}

// Default CORS lists.
func defaultCORSMethods() []string {
	return []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodHead}
}

func defaultCORSHeaders() []string {
	return []string{"Authorization", "Content-Type", "Content-Encoding", "X-Syncular-Scopes", "If-None-Match"}
}

func defaultCORSExposed() []string { return []string{"ETag", "Retry-After", "Content-Encoding"} }

// originPolicy decides on browser origins: the CORS middleware and the
// WebSocket upgrade's Origin check.
type originPolicy struct {
	c *cors.Cors
}

// newOriginPolicy validates cfg and builds its middleware. A nil cfg
// returns nil: no CORS headers, and a WebSocket upgrade must come from
// the handler's own origin (or carry no Origin).
func newOriginPolicy(cfg *CORSConfig) (*originPolicy, error) {
	if cfg == nil {
		return nil, nil
	}
	if len(cfg.AllowedOrigins) == 0 {
		return nil, errors.New("CORS.AllowedOrigins is empty: list the origins allowed (\"*\" for any)")
	}
	for _, o := range cfg.AllowedOrigins {
		switch {
		case o == "*":
			if cfg.AllowCredentials {
				return nil, errors.New("CORS: AllowCredentials cannot be combined with the \"*\" origin; list the origins")
			}
		case strings.Count(o, "*") > 1:
			return nil, errors.New("CORS origin " + o + ": at most one \"*\"")
		case !strings.Contains(o, "://"):
			return nil, errors.New("CORS origin " + o + ": want scheme://host[:port], such as https://app.example.com")
		}
	}
	opts := cors.Options{
		AllowedOrigins:   cfg.AllowedOrigins,
		AllowedMethods:   orDefault(cfg.AllowedMethods, defaultCORSMethods),
		AllowedHeaders:   orDefault(cfg.AllowedHeaders, defaultCORSHeaders),
		ExposedHeaders:   orDefault(cfg.ExposedHeaders, defaultCORSExposed),
		AllowCredentials: cfg.AllowCredentials,
	}
	switch {
	case cfg.MaxAge > 0:
		opts.MaxAge = max(1, int(cfg.MaxAge/time.Second))
	case cfg.MaxAge < 0:
		opts.MaxAge = -1
	}
	for i, m := range opts.AllowedMethods {
		opts.AllowedMethods[i] = strings.ToUpper(m)
	}
	return &originPolicy{c: cors.New(opts)}, nil
}

func orDefault(v []string, def func() []string) []string {
	if len(v) == 0 {
		return def()
	}
	return append([]string(nil), v...)
}

// wrap answers preflights and adds the CORS headers of actual requests.
// A preflight from an origin not allowed is refused with 403 (a browser
// would refuse it anyway; the status says why).
func (p *originPolicy) wrap(next http.Handler, s *Server) http.Handler {
	h := p.c.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" &&
			!p.c.OriginAllowed(r) {
			s.writeError(w, "preflight", syncerr.New(syncerr.CodeForbidden, "origin not allowed"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// allowUpgrade reports whether a WebSocket upgrade may proceed: a request
// without Origin is not from a browser and passes; a browser's must come
// from an allowed origin, or, without a CORS configuration, from the
// origin the request was sent to (the Host header, or the
// X-Forwarded-Host a proxy set), so that a page on another site cannot
// open a socket with the user's cookies.
func (p *originPolicy) allowUpgrade(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if p != nil {
		return p.c.OriginAllowed(r)
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	// Behind a proxy that rewrites Host, the public host it forwards. A
	// browser cannot set this header on a WebSocket, so a page on another
	// site cannot use it to pass.
	fwd, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Host"), ",")
	return fwd != "" && strings.EqualFold(u.Host, strings.TrimSpace(fwd))
}
