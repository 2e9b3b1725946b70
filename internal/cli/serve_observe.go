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
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/config"
)

// bindObserveFlags declares the flags of the observability and
// browser-facing settings (docs/observability.md) on fs; the returned
// function applies those given on the command line over c.
func bindObserveFlags(fs *flag.FlagSet) func(c *config.Config) {
	d := config.Default()
	var (
		logFormat, logLevel, adminListen                   string
		accessLog, metrics, corsCredentials                bool
		corsOrigins, corsMethods, corsHeaders, corsExposed commaList
		corsMaxAge                                         time.Duration
	)
	fs.StringVar(&logFormat, "log-format", d.Log.Format, "log format: text or json (log.format, SYNCGO_LOG_FORMAT)")
	fs.StringVar(&logLevel, "log-level", d.Log.Level, "log level: debug, info, warn or error (log.level, SYNCGO_LOG_LEVEL)")
	fs.BoolVar(&accessLog, "access-log", d.Log.Access, "log one line per request (log.access, SYNCGO_LOG_ACCESS)")
	fs.StringVar(&adminListen, "admin-listen", "", "address of the admin listener: /healthz, /readyz, /metrics and /debug/pprof/; "+
		"off when empty (admin.listen, SYNCGO_ADMIN_LISTEN)")
	fs.BoolVar(&metrics, "metrics", d.Metrics.Enabled, "collect Prometheus metrics, served on the admin listener (metrics.enabled, SYNCGO_METRICS_ENABLED)")
	fs.Var(&corsOrigins, "cors-origins", "comma-separated origins allowed to call the routes from a browser (https://app.example.com, "+
		"https://*.example.com, or *); CORS is off when empty (cors.allowed_origins, SYNCGO_CORS_ALLOWED_ORIGINS)")
	fs.Var(&corsMethods, "cors-methods", "comma-separated methods allowed cross-origin; default GET,POST,PUT,HEAD (cors.allowed_methods, SYNCGO_CORS_ALLOWED_METHODS)")
	fs.Var(&corsHeaders, "cors-headers", "comma-separated request headers allowed cross-origin; default "+
		"Authorization,Content-Type,Content-Encoding,X-Syncular-Scopes,If-None-Match (cors.allowed_headers, SYNCGO_CORS_ALLOWED_HEADERS)")
	fs.Var(&corsExposed, "cors-expose", "comma-separated response headers a browser may read; default ETag,Retry-After,Content-Encoding "+
		"(cors.exposed_headers, SYNCGO_CORS_EXPOSED_HEADERS)")
	fs.DurationVar(&corsMaxAge, "cors-max-age", d.CORS.MaxAge, "how long a browser may cache a preflight answer (cors.max_age, SYNCGO_CORS_MAX_AGE)")
	fs.BoolVar(&corsCredentials, "cors-credentials", false, "let browsers send cookies cross-origin; not with the * origin "+
		"(cors.allow_credentials, SYNCGO_CORS_ALLOW_CREDENTIALS)")
	return func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "log-format":
				c.Log.Format = logFormat
			case "log-level":
				c.Log.Level = logLevel
			case "access-log":
				c.Log.Access = accessLog
			case "admin-listen":
				c.Admin.Listen = adminListen
			case "metrics":
				c.Metrics.Enabled = metrics
			case "cors-origins":
				c.CORS.AllowedOrigins = corsOrigins
			case "cors-methods":
				c.CORS.AllowedMethods = corsMethods
			case "cors-headers":
				c.CORS.AllowedHeaders = corsHeaders
			case "cors-expose":
				c.CORS.ExposedHeaders = corsExposed
			case "cors-max-age":
				c.CORS.MaxAge = corsMaxAge
			case "cors-credentials":
				c.CORS.AllowCredentials = corsCredentials
			}
		})
	}
}

// commaList is a flag of comma-separated values.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }

func (l *commaList) Set(v string) error {
	*l = nil
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// newLogger returns the process logger the log settings ask for.
func newLogger(l config.Log, w io.Writer) (*slog.Logger, error) {
	level, err := l.SlogLevel()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.Format) {
	case config.LogText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case config.LogJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log.format %q: want text or json", l.Format)
}

// observability is serve's admin listener, metrics registry and trace
// pipeline.
type observability struct {
	cfg     config.Config
	adminLn net.Listener
	admin   *http.Server
	reg     *prometheus.Registry
	tracer  *sdktrace.TracerProvider
	log     *slog.Logger
}

// startTracing builds the trace pipeline when the tracing settings (or
// the OTLP environment variables) ask for one (serve_trace.go).
func (o *observability) startTracing(ctx context.Context, getenv func(string) string) error {
	tp, err := newTracerProvider(ctx, o.cfg.Tracing, getenv)
	if err != nil {
		return err
	}
	o.tracer = tp
	if tp != nil {
		// The SDK reports a failed export through the process-wide
		// handler, which would print an unstructured line: the process
		// log gets it instead.
		log := o.log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: spans not exported", "err", err) }))
		o.log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", o.cfg.Tracing.Endpoint, "sample_ratio", o.cfg.Tracing.SampleRatio)
	}
	return nil
}

// listen binds the admin listener, when one is configured, so that a bad
// address fails serve before the database is opened.
func (o *observability) listen(cfg config.Config, logger *slog.Logger) error {
	o.cfg, o.log = cfg, logger
	if cfg.Admin.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin.listen: %w", err)
	}
	if addr, ok := ln.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() {
		logger.Warn("the admin listener (metrics, pprof) is on a non-loopback address: keep it off public networks", "addr", ln.Addr().String())
	}
	o.adminLn = ln
	return nil
}

// apply sets the server configuration's metrics registry (with the
// admin listener only), access log (accessLog, when enabled) and CORS.
func (o *observability) apply(sc *syncgo.Config, accessLog *slog.Logger) {
	if o.adminLn != nil && o.cfg.Metrics.Enabled {
		o.reg = prometheus.NewRegistry()
		o.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		sc.Metrics = o.reg
	}
	if o.cfg.Log.Access {
		sc.AccessLog = accessLog
	}
	if o.tracer != nil {
		sc.TracerProvider = o.tracer
	}
	if c := o.cfg.CORS; len(c.AllowedOrigins) > 0 {
		sc.CORS = &syncgo.CORSConfig{AllowedOrigins: c.AllowedOrigins, AllowedMethods: c.AllowedMethods,
			AllowedHeaders: c.AllowedHeaders, ExposedHeaders: c.ExposedHeaders, MaxAge: c.MaxAge,
			AllowCredentials: c.AllowCredentials}
	}
}

// mount adds the probes to the main listener's mux.
func (o *observability) mount(mux *http.ServeMux, srv *syncgo.Server) {
	mux.Handle("GET /healthz", srv.HealthzHandler())
	mux.Handle("GET /readyz", srv.ReadyzHandler())
}

// adminHandler is the admin listener's mux: the probes, the metrics, the
// reactions' state (/admin/reactions) and net/http/pprof, which are served
// nowhere else.
func (o *observability) adminHandler(srv *syncgo.Server, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	o.mount(mux, srv)
	if o.reg != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError), Timeout: 10 * time.Second}))
	}
	mux.Handle("GET /admin/reactions", srv.ReactionsHandler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serve starts the admin listener, if any, and prints its address.
func (o *observability) serve(srv *syncgo.Server, logger *slog.Logger, stdout io.Writer) {
	if o.adminLn == nil {
		return
	}
	// Profiles and traces take as long as they are asked to: no write
	// timeout here.
	o.admin = &http.Server{Handler: o.adminHandler(srv, logger), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	fmt.Fprintf(stdout, "syncgo admin listening on http://%s (/healthz /readyz /metrics /admin/reactions /debug/pprof/)\n", o.adminLn.Addr())
	go func() {
		if err := o.admin.Serve(o.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin listener stopped", "err", err)
		}
	}()
}

// close stops the admin listener and exports the spans still batched.
func (o *observability) close() {
	if err := shutdownTracing(o.tracer); err != nil {
		o.log.Warn("tracing: spans not exported at exit", "err", err)
	}
	if o.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.admin.Shutdown(ctx)
	} else if o.adminLn != nil {
		_ = o.adminLn.Close()
	}
}

// observeSummary describes the observability settings for config check.
func observeSummary(cfg config.Config) []string {
	access := "off"
	if cfg.Log.Access {
		access = "on"
	}
	out := []string{fmt.Sprintf("log %s at %s, access log %s", cfg.Log.Format, cfg.Log.Level, access)}
	switch {
	case cfg.Admin.Listen == "":
		out = append(out, "admin listener off (no metrics, no pprof)")
	case cfg.Metrics.Enabled:
		out = append(out, "admin listener "+cfg.Admin.Listen+": /healthz /readyz /metrics /admin/reactions /debug/pprof/")
	default:
		out = append(out, "admin listener "+cfg.Admin.Listen+": /healthz /readyz /admin/reactions /debug/pprof/ (metrics off)")
	}
	if len(cfg.CORS.AllowedOrigins) == 0 {
		out = append(out, "CORS off (/realtime accepts browsers of its own origin only)")
	} else {
		out = append(out, fmt.Sprintf("CORS origins %s, max age %s, credentials %v",
			strings.Join(cfg.CORS.AllowedOrigins, ","), cfg.CORS.MaxAge, cfg.CORS.AllowCredentials))
	}
	switch {
	case cfg.Tracing.Endpoint != "":
		out = append(out, fmt.Sprintf("tracing: OTLP/HTTP to %s, sample ratio %g", cfg.Tracing.Endpoint, cfg.Tracing.SampleRatio))
	case tracingOn(cfg.Tracing, os.Getenv):
		out = append(out, fmt.Sprintf("tracing: OTLP/HTTP to the OTEL_EXPORTER_OTLP_* endpoint, sample ratio %g", cfg.Tracing.SampleRatio))
	default:
		out = append(out, "tracing off")
	}
	return out
}
