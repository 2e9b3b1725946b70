package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/auth"
	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/webhook"
)

// servePlan is what serve prepares from the settings before it opens the
// database: the schema with its window and checkpoints, and the
// authentication. close stops the authentication's background work.
type servePlan struct {
	sc            *schema.Compiled
	window        []*schema.Compiled
	decls         []store.CheckpointDeclaration
	authenticate  func(*http.Request) (syncgo.Auth, error)
	resolveScopes func(context.Context, syncgo.ScopeRequest) (map[string][]string, error)
	grantQueries  []syncgo.GrantQuery
	close         func()
}

// planServe loads the schema files and builds the authentication of
// mode (cfg.AuthMode's answer); loopback and addr are the protocol
// listener's, for the warnings of the development authentication.
func planServe(cfg config.Config, mode string, loopback bool, addr net.Addr, logger *slog.Logger) (*servePlan, error) {
	sc, err := loadSchema(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	window, err := loadSchemaWindow(cfg.SchemaWindow, sc)
	if err != nil {
		return nil, err
	}
	decls, err := declarations(cfg.Checkpoints, sc.Version())
	if err != nil {
		return nil, err
	}
	if err := checkOperations(cfg.Operations, sc); err != nil {
		return nil, fmt.Errorf("operations: %w", err)
	}
	p := &servePlan{sc: sc, window: window, decls: decls, close: func() {}}
	switch mode {
	case config.ModeJWT:
		ac := cfg.Auth.Config
		ac.Logger = logger
		a, err := auth.New(ac, cfg.Scopes, sc)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		p.close = a.Close
		for _, v := range a.Scopes().Unruled(sc) {
			logger.Warn("scope variable " + v + " has no rule in scopes: no actor is granted it")
		}
		p.authenticate, p.resolveScopes, p.grantQueries = a.Authenticate, a.ResolveScopes, a.Scopes().GrantQueries()
		logger.Info("JWT authentication", "algorithms", strings.Join(a.Algorithms(), ","), "issuer", cfg.Auth.Issuer,
			"audience", strings.Join(cfg.Auth.Audience, ","), "token_sources", sourcesString(ac.TokenSources))
	default:
		if !loopback {
			logger.Warn("DEVELOPMENT AUTHENTICATION ON A NON-LOOPBACK ADDRESS (-dev): anyone who can reach " +
				addr.String() + " can read and write every scope")
		}
		logger.Warn("DEVELOPMENT AUTHENTICATION: 'Authorization: Bearer <actorId>' is trusted as is, " +
			"every actor is in partition \"default\" and may read and write every scope. " +
			"Configure JWT authentication (docs/auth.md) for production.")
		if len(cfg.Scopes) > 0 {
			logger.Warn("scopes are ignored under development authentication: every actor may use every scope")
		}
		p.authenticate, p.resolveScopes = devAuthenticate, devResolver(sc)
	}
	return p, nil
}

// serverConfig is the server configuration serve builds from the
// settings on the opened store st: everything syncgo.New checks comes
// from here, so that a test can build the same server without listening.
func (p *servePlan) serverConfig(cfg config.Config, st store.Store, obs *observability, accessLog *slog.Logger, addr net.Addr, logger *slog.Logger) (syncgo.Config, error) {
	l := cfg.Limits
	validators, commitValidator, err := cfg.CompileValidators(p.sc)
	if err != nil {
		return syncgo.Config{}, err
	}
	scfg := syncgo.Config{
		Validators:            validators,
		CommitValidator:       commitValidator,
		Store:                 st,
		Schema:                p.sc,
		SchemaWindow:          p.window,
		Authenticate:          p.authenticate,
		ResolveScopes:         p.resolveScopes,
		GrantQueries:          p.grantQueries,
		Logger:                logger,
		Declarations:          p.decls,
		Operations:            buildOperations(cfg.Operations),
		MaxRequestBytes:       l.MaxRequestBytes,
		MaxBodyMemory:         l.MaxBodyMemory,
		MaxFrameBytes:         l.MaxFrameBytes,
		StallTimeout:          l.StallTimeout,
		WriteTimeout:          l.WriteTimeout,
		MaxConcurrentRequests: l.MaxConcurrentRequests,
		MaxQueuedRequests:     l.MaxQueuedRequests,
		QueueTimeout:          l.QueueTimeout,
		Limits: syncgo.Limits{
			MaxOperationsPerRequest:    l.MaxOperationsPerRequest,
			MaxSubscriptionsPerRequest: l.MaxSubscriptionsPerRequest,
			InlineSegmentMaxBytes:      l.InlineSegmentMaxBytes,
			SegmentTTL:                 l.SegmentTTL,
			MaxCRDTBytes:               l.MaxCRDTBytes,
			CatchUpBootstrapAfter:      l.CatchUpBootstrapAfter,
		},
		Realtime: syncgo.RealtimeConfig{
			Heartbeat:          cfg.Realtime.Heartbeat,
			ReresolveInterval:  cfg.Realtime.ReresolveInterval,
			QueueMessages:      cfg.Realtime.QueueMessages,
			QueueBytes:         cfg.Realtime.QueueBytes,
			MaxDeltaBytes:      cfg.Realtime.MaxDeltaBytes,
			MaxPresenceBytes:   cfg.Realtime.MaxPresenceBytes,
			ReleaseAfterChurn:  cfg.Realtime.ReleaseAfterChurn,
			DisableCompression: cfg.Realtime.DisableCompression,
		},
		RetentionInterval: cfg.Retention.Interval,
		Retention: syncgo.RetentionPolicy{
			ActiveWindow:       cfg.Retention.ActiveWindow,
			AgeForce:           cfg.Retention.AgeForce,
			MinRetainedCommits: cfg.Retention.MinRetainedCommits,
			PushResultsMaxAge:  cfg.Retention.PushResultsMaxAge,
		},
	}
	if len(cfg.Webhooks) > 0 {
		hooks, err := cfg.Hooks(p.sc)
		if err != nil {
			return syncgo.Config{}, err
		}
		planner, handlers, err := webhook.Reactions(hooks, p.sc, nil)
		if err != nil {
			return syncgo.Config{}, err
		}
		scfg.Reactions = &syncgo.ReactionConfig{Planner: planner, Handlers: handlers, OnEvent: func(ev reaction.Event) {
			if p := ev.Prune; p != nil {
				logger.Debug(ev.Type, "completed", p.Completed, "dead_lettered", p.DeadLettered, "may_have_more", p.MayHaveMore)
				return
			}
			logger.Debug(ev.Type, "partition", ev.Partition, "reaction", ev.IdempotencyKey, "name", ev.Name,
				"attempt", ev.Attempt, "code", ev.Code)
		}}
		for _, h := range hooks {
			logger.Info("webhook", "name", h.Name, "url", h.Endpoint(), "tables", strings.Join(h.Tables, ","), "signed", h.Secret != "",
				"previous_secrets", len(h.PreviousSecrets))
		}
	}
	obs.apply(&scfg, accessLog)
	applyLimitConfig(&scfg, cfg) // serve_limits.go
	if err := applySegmentConfig(&scfg, cfg, addr, cfg.Mount); err != nil {
		return syncgo.Config{}, err
	}
	return scfg, nil
}
