package cli

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/auth"
	"github.com/syncgo/syncgo/internal/config"
)

// runConfig runs `syncgo config check FILE`.
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: syncgo config check FILE")
		return 2
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: syncgo config check FILE")
		return 2
	}
	path := fs.Arg(0)
	cfg, err := config.Load(path, nil)
	if err != nil {
		// Load failed before the secrets were known: hide what a DSN in
		// the message may carry.
		fmt.Fprintln(stderr, "syncgo config check:", config.RedactDSN(err.Error()))
		return 1
	}
	secrets := cfg.Secrets()
	stdout = config.NewRedactingWriter(stdout, secrets)
	stderr = config.NewRedactingWriter(stderr, secrets)
	summary, warnings, err := checkConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "syncgo config check: %s:\n", path)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "  %s\n", line)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK\n", path)
	for _, s := range summary {
		fmt.Fprintf(stdout, "  %s\n", s)
	}
	for _, w := range warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return 0
}

// checkConfig validates what serve would use, without listening or
// opening the database: the settings, the schema, the secret and key
// files, the auth settings and the scope rules compiled against the
// schema. It returns a summary (secrets redacted) and warnings.
func checkConfig(cfg config.Config) (summary, warnings []string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	sc, err := loadSchema(cfg.Schema)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	if _, _, err := cfg.CompileValidators(sc); err != nil {
		return nil, nil, err
	}
	// The binary has the built-in mergers only.
	if err := syncgo.CheckCRDTMergers(nil, sc); err != nil {
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	window, err := loadSchemaWindow(cfg.SchemaWindow, sc)
	if err != nil {
		return nil, nil, err
	}
	if _, err := declarations(cfg.Checkpoints, sc.Version()); err != nil {
		return nil, nil, err
	}
	if err := checkOperations(cfg.Operations, sc); err != nil {
		return nil, nil, fmt.Errorf("operations: %w", err)
	}
	hooks, err := cfg.Hooks(sc)
	if err != nil {
		return nil, nil, err
	}
	if cfg.SignedURLs.KeyFile != "" {
		if _, _, err := readSigningKeys(cfg.SignedURLs); err != nil {
			return nil, nil, err
		}
	}
	if cfg.DBPasswordFile != "" {
		if _, err := os.ReadFile(cfg.DBPasswordFile); err != nil {
			return nil, nil, fmt.Errorf("db_password_file: %w", err)
		}
	}
	schemaName := cfg.Schema
	if schemaName == "" {
		schemaName = "the demo schema"
	}
	kind := "SQLite"
	if config.IsPostgres(cfg.DB) {
		kind = "Postgres"
	}
	summary = append(summary,
		fmt.Sprintf("listen %s, mount %s", cfg.Listen, cfg.Mount),
		fmt.Sprintf("db %s (%s)", config.RedactDSN(cfg.DB), kind),
		fmt.Sprintf("schema %s (version %d; scope variables %s)", schemaName, sc.Version(), strings.Join(sc.Variables(), ", ")))
	if len(window) > 0 {
		versions := make([]string, len(window))
		for i, w := range window {
			versions[i] = strconv.Itoa(int(w.Version()))
		}
		summary = append(summary, fmt.Sprintf("schema window: clients of versions %s served too", strings.Join(versions, ", ")))
	}
	summary = append(summary, observeSummary(cfg)...)
	for _, h := range hooks {
		signed := "unsigned"
		switch n := 1 + len(h.PreviousSecrets); {
		case h.Secret == "":
		case n == 1:
			signed = "signed"
		default:
			// Never the secrets: how many sign each delivery.
			signed = fmt.Sprintf("signed with %d secrets: the newest and %d previous", n, n-1)
		}
		summary = append(summary, fmt.Sprintf("webhook %s: changes of %s to %s (%s)", h.Name, strings.Join(h.Tables, ", "), h.Endpoint(), signed))
	}
	if n := len(cfg.Operations.Queries); n > 0 {
		summary = append(summary, fmt.Sprintf("operations: %d scoped quer(ies)", n))
	}
	if cfg.Blobs.IsS3() {
		line, err := s3Summary(cfg.Blobs)
		if err != nil {
			return nil, nil, err
		}
		summary = append(summary, line)
	}
	if st := cfg.Segments.Store; strings.HasPrefix(st, "s3://") {
		line, err := s3Summary(config.Blobs{Store: st, S3: cfg.Blobs.S3})
		if err != nil {
			return nil, nil, fmt.Errorf("segments.store: %w", err)
		}
		summary = append(summary, strings.Replace(line, "blobs in", "segment bytes in", 1))
	} else if st != "" && st != "db" {
		return nil, nil, fmt.Errorf(`segments.store %q: want "db" or "s3://<bucket>[/<prefix>]"`, st)
	}
	lim, err := limitSummary(cfg) // serve_limits.go
	if err != nil {
		return nil, nil, err
	}
	summary = append(summary, lim...)
	mode := cfg.Auth.Mode
	if mode == "" {
		if cfg.Auth.Configured() {
			mode = config.ModeJWT
		} else {
			// serve refuses the development authentication on an address
			// other hosts reach: so does the check.
			loopback, err := listenLoopback(cfg.Listen)
			if err != nil {
				return nil, nil, err
			}
			if _, err := cfg.AuthMode(loopback); err != nil {
				return nil, nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
			}
			summary = append(summary, "auth: none configured: development authentication, on a loopback listen address only")
			warnings = append(warnings, "no authentication is configured (docs/auth.md)")
			return summary, warnings, nil
		}
	}
	if mode == config.ModeDev {
		summary = append(summary, "auth dev: any 'Bearer <actorId>' is trusted and may use every scope")
		warnings = append(warnings, "auth.mode is dev: never serve it to untrusted clients")
		if len(cfg.Scopes) > 0 {
			warnings = append(warnings, "scopes are ignored under development authentication")
		}
		return summary, warnings, nil
	}
	scopes, err := auth.Check(cfg.Auth.Config, cfg.Scopes, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	var keys []string
	if cfg.Auth.HS256Secret != "" || cfg.Auth.HS256SecretFile != "" {
		keys = append(keys, "HS256 secret")
	}
	if n := len(cfg.Auth.PublicKeys); n > 0 {
		keys = append(keys, fmt.Sprintf("%d static key(s)", n))
	}
	if cfg.Auth.JWKSURL != "" {
		keys = append(keys, "JWKS "+config.RedactURL(cfg.Auth.JWKSURL)+" (not fetched by check)")
	}
	summary = append(summary, "auth jwt: "+strings.Join(keys, ", "),
		fmt.Sprintf("  issuer %q, audience %q, actor claim %q, token sources: %s",
			cfg.Auth.Issuer, strings.Join(cfg.Auth.Audience, ","), orDefault(cfg.Auth.ActorClaim, auth.DefaultActorClaim), sourcesString(cfg.Auth.TokenSources)))
	var rules []string
	for _, v := range sc.Variables() {
		if n := len(cfg.Scopes[v]); n > 0 {
			q := 0
			for _, r := range cfg.Scopes[v] {
				if r.Query != "" {
					q++
				}
			}
			if q > 0 {
				rules = append(rules, fmt.Sprintf("%s (%d rule(s), %d query)", v, n, q))
			} else {
				rules = append(rules, fmt.Sprintf("%s (%d rule(s))", v, n))
			}
		}
	}
	summary = append(summary, "scopes: "+orDefault(strings.Join(rules, ", "), "none"))
	for _, v := range scopes.Unruled(sc) {
		warnings = append(warnings, fmt.Sprintf("scope variable %s has no rule: no actor is granted it", v))
	}
	if cfg.Auth.Issuer == "" {
		warnings = append(warnings, "auth.issuer is not set: tokens of any issuer the keys verify are accepted")
	}
	if len(cfg.Auth.Audience) == 0 {
		warnings = append(warnings, "auth.audience is not set: tokens minted for other services are accepted")
	}
	return summary, warnings, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// listenLoopback reports whether serve's listener on listen would be on a
// loopback address, resolving a host name as net.Listen does, without
// listening: an empty host is every interface.
func listenLoopback(listen string) (bool, error) {
	addr, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		return false, fmt.Errorf("listen %q: %w", listen, err)
	}
	return addr.IP.IsLoopback(), nil
}
