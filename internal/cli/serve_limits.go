package cli

import (
	"crypto/tls"
	"flag"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/config"
)

// bindLimitFlags declares the flags of the rate limits and socket caps; the returned
// function applies those given on the command line over c.
func bindLimitFlags(fs *flag.FlagSet) func(c *config.Config) {
	var (
		perActor, global            float64
		perActorBurst, globalBurst  int
		maxSockets, maxActorSockets int
	)
	fs.Float64Var(&perActor, "rate-per-actor", 0, "requests per second one actor may make, POST /sync, socket rounds and /operations together; 0: no limit (limits.rate_per_actor, SYNCGO_LIMITS_RATE_PER_ACTOR)")
	fs.IntVar(&perActorBurst, "rate-per-actor-burst", 0, "requests one actor may make at once; default the rate rounded up (limits.rate_per_actor_burst, SYNCGO_LIMITS_RATE_PER_ACTOR_BURST)")
	fs.Float64Var(&global, "rate-global", 0, "requests per second of all actors together; 0: no limit (limits.rate_global, SYNCGO_LIMITS_RATE_GLOBAL)")
	fs.IntVar(&globalBurst, "rate-global-burst", 0, "requests of all actors at once; default the rate rounded up (limits.rate_global_burst, SYNCGO_LIMITS_RATE_GLOBAL_BURST)")
	fs.IntVar(&maxSockets, "max-sockets", 0, "cap on open sockets (/realtime and /operations/realtime); 0: no cap (realtime.max_sockets, SYNCGO_REALTIME_MAX_SOCKETS)")
	fs.IntVar(&maxActorSockets, "max-sockets-per-actor", 0, "cap on the open sockets of one actor; 0: no cap (realtime.max_sockets_per_actor, SYNCGO_REALTIME_MAX_SOCKETS_PER_ACTOR)")
	return func(c *config.Config) {
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "rate-per-actor":
				c.Limits.RatePerActor = perActor
			case "rate-per-actor-burst":
				c.Limits.RatePerActorBurst = perActorBurst
			case "rate-global":
				c.Limits.RateGlobal = global
			case "rate-global-burst":
				c.Limits.RateGlobalBurst = globalBurst
			case "max-sockets":
				c.Realtime.MaxSockets = maxSockets
			case "max-sockets-per-actor":
				c.Realtime.MaxSocketsPerActor = maxActorSockets
			}
		})
	}
}

// applyLimitConfig sets the library's rate limits and socket caps from
// the config.
func applyLimitConfig(scfg *syncgo.Config, cfg config.Config) {
	scfg.Realtime.MaxSockets = cfg.Realtime.MaxSockets
	scfg.Realtime.MaxSocketsPerActor = cfg.Realtime.MaxSocketsPerActor
	l := cfg.Limits
	if l.RatePerActor > 0 || l.RateGlobal > 0 {
		scfg.RateLimit = &syncgo.RateLimitConfig{
			PerActor: rate.Limit(l.RatePerActor), PerActorBurst: l.RatePerActorBurst,
			Global: rate.Limit(l.RateGlobal), GlobalBurst: l.RateGlobalBurst,
			MaxActors: l.RateMaxActors,
		}
	}
}

// limitSummary describes the TLS files (loaded, so that a bad pair fails
// the check), the rate limits and the socket caps for config check.
func limitSummary(cfg config.Config) ([]string, error) {
	var out []string
	if cfg.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("tls_cert_file, tls_key_file: %w", err)
		}
		out = append(out, "TLS: certificate "+cfg.TLSCertFile+" (HTTPS and wss on the listener)")
	}
	l := cfg.Limits
	rates := "rate limits off"
	if l.RatePerActor > 0 || l.RateGlobal > 0 {
		rates = fmt.Sprintf("rate limits: per actor %s, global %s", rateString(l.RatePerActor, l.RatePerActorBurst),
			rateString(l.RateGlobal, l.RateGlobalBurst))
	}
	out = append(out, rates+fmt.Sprintf("; realtime sockets: %s in total, %s per actor",
		capString(cfg.Realtime.MaxSockets), capString(cfg.Realtime.MaxSocketsPerActor)))
	out = append(out, retentionSummary(cfg.Retention))
	return out, nil
}

// retentionSummary is the commit log pruning serve applies, defaults
// filled in.
func retentionSummary(r config.Retention) string {
	if r.Interval < 0 {
		return "retention: off (the commit log and the push-result journal are never pruned)"
	}
	or := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	kept := r.MinRetainedCommits
	if kept == 0 {
		kept = config.FloorRetainedCommits
	}
	journal := "push results kept forever"
	if r.PushResultsMaxAge > 0 {
		journal = fmt.Sprintf("push results older than %v pruned", r.PushResultsMaxAge)
	}
	return fmt.Sprintf("retention: pruned every %v; clients seen within %v hold the log back, commits older than %v go regardless, the newest %d always kept; %s",
		or(r.Interval, time.Minute), or(r.ActiveWindow, config.FloorActiveWindow), or(r.AgeForce, config.FloorAgeForce), kept, journal)
}

func rateString(r float64, burst int) string {
	if r <= 0 {
		return "off"
	}
	if burst <= 0 {
		burst = max(1, int(math.Ceil(r)))
	}
	return fmt.Sprintf("%g/s (burst %d)", r, burst)
}

func capString(n int) string {
	if n <= 0 {
		return "no cap"
	}
	return fmt.Sprint(n)
}
