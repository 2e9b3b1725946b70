package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncgo/syncgo"
)

// observeSettings are serve's settings for logs, probes, metrics, the
// admin listener and CORS (docs/observability.md), and the admin
// listener's state once serve runs.
type observeSettings struct {
	logFormat   string
	logLevel    string
	accessLog   bool
	adminListen string

	corsOrigins     commaList
	corsMethods     commaList
	corsHeaders     commaList
	corsExpose      commaList
	corsMaxAge      time.Duration
	corsCredentials bool

	adminLn net.Listener
	admin   *http.Server
	reg     *prometheus.Registry
}

// commaList is a flag of comma-separated values.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }

func (l *commaList) Set(v string) error {
	*l = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func envBool(key string, def bool) bool {
	switch strings.ToLower(os.Getenv(key)) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(key)); err == nil {
		return d
	}
	return def
}

// register adds the settings' flags to serve's flag set; each defaults to
// its environment variable.
func (o *observeSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&o.logFormat, "log-format", envOr("SYNCGO_LOG_FORMAT", "text"), "log format: text or json (SYNCGO_LOG_FORMAT)")
	fs.StringVar(&o.logLevel, "log-level", envOr("SYNCGO_LOG_LEVEL", "info"), "log level: debug, info, warn or error (SYNCGO_LOG_LEVEL)")
	fs.BoolVar(&o.accessLog, "access-log", envBool("SYNCGO_ACCESS_LOG", true), "log one line per request at level info (SYNCGO_ACCESS_LOG)")
	fs.StringVar(&o.adminListen, "admin-listen", envOr("SYNCGO_ADMIN_LISTEN", ""),
		"address of the admin listener: /healthz, /readyz, /metrics (Prometheus) and /debug/pprof/; off when empty (SYNCGO_ADMIN_LISTEN)")
	for _, l := range []struct {
		v         *commaList
		name, env string
		usage     string
	}{
		{&o.corsOrigins, "cors-origins", "SYNCGO_CORS_ORIGINS", "comma-separated origins allowed to call the routes from a browser " +
			"(https://app.example.com, https://*.example.com, or *); CORS is off when empty, and /realtime then accepts only its own origin"},
		{&o.corsMethods, "cors-methods", "SYNCGO_CORS_METHODS", "comma-separated methods allowed cross-origin; default GET,POST,HEAD"},
		{&o.corsHeaders, "cors-headers", "SYNCGO_CORS_HEADERS", "comma-separated request headers allowed cross-origin; default " +
			"Authorization,Content-Type,Content-Encoding,X-Syncular-Scopes,If-None-Match"},
		{&o.corsExpose, "cors-expose", "SYNCGO_CORS_EXPOSE", "comma-separated response headers a browser may read; default ETag,Retry-After,Content-Encoding"},
	} {
		if v := os.Getenv(l.env); v != "" {
			_ = l.v.Set(v)
		}
		fs.Var(l.v, l.name, l.usage+" ("+l.env+")")
	}
	fs.DurationVar(&o.corsMaxAge, "cors-max-age", envDuration("SYNCGO_CORS_MAX_AGE", 10*time.Minute),
		"how long a browser may cache a preflight answer (SYNCGO_CORS_MAX_AGE)")
	fs.BoolVar(&o.corsCredentials, "cors-credentials", envBool("SYNCGO_CORS_CREDENTIALS", false),
		"let browsers send cookies cross-origin; not with the * origin (SYNCGO_CORS_CREDENTIALS)")
}

// logger returns the process logger the settings ask for.
func (o *observeSettings) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", o.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", o.logFormat)
}

// listen binds the admin listener, when one is asked for, so that a bad
// address fails serve before the database is opened.
func (o *observeSettings) listen(logger *slog.Logger) error {
	if o.adminListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", o.adminListen)
	if err != nil {
		return fmt.Errorf("-admin-listen: %w", err)
	}
	if addr, ok := ln.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
		logger.Warn("the admin listener (metrics, pprof) is on a non-loopback address: keep it off public networks", "addr", ln.Addr().String())
	}
	o.adminLn = ln
	return nil
}

// apply sets the server configuration's metrics registry (with the
// admin listener only), access log and CORS.
func (o *observeSettings) apply(cfg *syncgo.Config, logger *slog.Logger) {
	if o.adminLn != nil {
		o.reg = prometheus.NewRegistry()
		o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Metrics = o.reg
	}
	if o.accessLog {
		cfg.AccessLog = logger
	}
	if len(o.corsOrigins) > 0 {
		cfg.CORS = &syncgo.CORSConfig{AllowedOrigins: o.corsOrigins, AllowedMethods: o.corsMethods,
			AllowedHeaders: o.corsHeaders, ExposedHeaders: o.corsExpose, MaxAge: o.corsMaxAge,
			AllowCredentials: o.corsCredentials}
	}
}

// mount adds the probes to the main listener's mux.
func (o *observeSettings) mount(mux *http.ServeMux, srv *syncgo.Server) {
	mux.Handle("GET /healthz", srv.HealthzHandler())
	mux.Handle("GET /readyz", srv.ReadyzHandler())
}

// adminHandler is the admin listener's mux: the probes, the metrics and
// net/http/pprof, which is served nowhere else.
func (o *observeSettings) adminHandler(srv *syncgo.Server, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	o.mount(mux, srv)
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError), Timeout: 10 * time.Second}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serve starts the admin listener, if any, and prints its address.
func (o *observeSettings) serve(srv *syncgo.Server, logger *slog.Logger, stdout io.Writer) {
	if o.adminLn == nil {
		return
	}
	// Profiles and traces take as long as they are asked to: no write
	// timeout here.
	o.admin = &http.Server{Handler: o.adminHandler(srv, logger), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	fmt.Fprintf(stdout, "syncgo admin listening on http://%s (/healthz /readyz /metrics /debug/pprof/)\n", o.adminLn.Addr())
	go func() {
		if err := o.admin.Serve(o.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin listener stopped", "err", err)
		}
	}()
}

// close stops the admin listener.
func (o *observeSettings) close() {
	if o.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.admin.Shutdown(ctx)
	} else if o.adminLn != nil {
		_ = o.adminLn.Close()
	}
}
