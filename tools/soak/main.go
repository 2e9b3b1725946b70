// Command soak drives syncgo servers with a long mixed workload while it
// injects faults, and checks invariants at the end: every acknowledged
// commit is in the server's state exactly once, no rejected commit is, no
// client holds a row outside its scopes, the clients of a scope converge,
// no 5xx answer falls outside a fault's window, and no server log shows a
// panic. It samples each server process's RSS and goroutines over time.
//
// It starts the servers itself (-syncgo, -db; -instances 2 for a fleet
// on one Postgres database) or drives running ones (-url), and uses the
// SSP2 client of internal/sspclient. See BENCHMARKS.md ("Soak").
package main

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

//go:embed schema.json
var soakSchema []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	rep, err := soak(ctx, cfg, stderr)
	if rep != nil {
		rep.write(stdout)
		if cfg.out != "" {
			if werr := rep.writeJSON(filepath.Join(cfg.out, "report.json")); werr != nil {
				fmt.Fprintln(stderr, "soak:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var urls string
	fs.StringVar(&c.bin, "syncgo", "", "syncgo binary: the tool starts -instances processes serving -db (with -url: none)")
	fs.StringVar(&c.db, "db", "", "database of the started processes: a SQLite file path or a postgres:// URL")
	fs.IntVar(&c.instances, "instances", 1, "processes started on -db (2 or more: a fleet; needs Postgres)")
	fs.StringVar(&urls, "url", "", "comma-separated mount points of running servers instead of -syncgo (no process faults); they must use the soak schema and auth (see -print-config)")
	fs.StringVar(&c.secret, "secret", "soak-secret-soak-secret-soak-secret-0123", "HS256 secret of the tokens")
	fs.StringVar(&c.out, "out", "", "directory of the processes' configurations and logs and of report.json (default: a temporary directory)")
	fs.DurationVar(&c.duration, "duration", 0, "how long the load and the faults run (default 5m)")
	fs.IntVar(&c.clients, "clients", 100, "simulated clients")
	fs.IntVar(&c.tenants, "tenants", 4, "tenants (partitions)")
	fs.IntVar(&c.projects, "projects", 4, "projects (scopes) per tenant; each client is granted two of them (one when there are two or fewer)")
	fs.Float64Var(&c.sockets, "sockets", 0.5, "fraction of the clients that hold a realtime socket")
	fs.DurationVar(&c.think, "think", 0, "mean pause between a client's actions (default 500ms)")
	fs.BoolVar(&c.reinstall, "reinstall", true, "clients now and then throw their replica away and bootstrap a fresh one")
	fs.BoolVar(&c.faults, "faults", true, "inject faults")
	fs.DurationVar(&c.killEvery, "kill-every", 0, "SIGKILL and restart a process this often (default 90s; negative: never)")
	fs.BoolVar(&c.killAll, "kill-all", false, "in a fleet, kill every process in turn (default: the last one only, so that the first one's memory is followed over the whole run)")
	fs.DurationVar(&c.terminateEvery, "terminate-every", 0, "Postgres: pg_terminate_backend of the database's connections this often (default 45s; negative: never)")
	fs.DurationVar(&c.dropEvery, "drop-every", 0, "drop a tenth of the sockets without a close frame this often (default 10s; negative: never)")
	fs.StringVar(&c.pgRestart, "pg-restart", "", "Postgres: restart the cluster once, at these offsets into the run (comma-separated durations), with pg_ctlcluster; the cluster is shared: use sparingly")
	fs.StringVar(&c.pgCluster, "pg-cluster", "", "VERSION of pg_ctlcluster VERSION main restart (default: the only directory of /etc/postgresql)")
	fs.DurationVar(&c.deployAt, "deploy-at", 0, "roll every process, one at a time (SIGTERM, start), to schema version 2 (a nullable column appended to items), with version 1 in its schema window, at this offset into the run; the clients stay at version 1 (default: never)")
	fs.DurationVar(&c.settle, "settle", 0, "bound of the catch-up after the faults stop (default 3m)")
	fs.DurationVar(&c.quiet, "quiet", 0, "after the faults stop and the outboxes drain, how long the sockets alone have to bring every replica up to date before it is compared with the server (default 15s)")
	fs.Int64Var(&c.seed, "seed", 1, "random seed of the clients' actions")
	printConfig := fs.Bool("print-config", false, "print the schema and the YAML settings a server driven by -url needs, and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *printConfig {
		fmt.Fprintf(stderr, "schema (schema: FILE):\n%s\nsettings:\n%s", soakSchema, authYAML(c.secret))
		return c, flag.ErrHelp
	}
	if urls != "" {
		c.urls = strings.Split(urls, ",")
	}
	if (c.bin == "") == (len(c.urls) == 0) {
		fmt.Fprintln(stderr, "soak: give either -syncgo (and -db) or -url")
		return c, flag.ErrHelp
	}
	if c.bin != "" && c.db == "" {
		fmt.Fprintln(stderr, "soak: -syncgo needs -db")
		return c, flag.ErrHelp
	}
	if c.instances > 1 && !isPostgres(c.db) {
		fmt.Fprintln(stderr, "soak: a fleet (-instances > 1) needs a postgres:// -db")
		return c, flag.ErrHelp
	}
	c.defaults()
	return c, nil
}

func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}
