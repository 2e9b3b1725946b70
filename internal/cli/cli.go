// Package cli implements the syncgo command line: argument parsing and
// dispatch to the subcommands. cmd/syncgo only calls Run.
package cli

import (
	"context"
	"fmt"
	"io"
)

const usage = `usage: syncgo <command> [flags]

commands:
  serve     start the sync server (SQLite file by default; -db postgres://... for Postgres;
            -config FILE: docs/configuration.md; JWT auth and scope rules: docs/auth.md)
  config check FILE
            validate a config file (settings, schema, keys, scope rules) without starting
  schema    show (reading only) the stored and running schema, what a start,
            a request and a push would get, and the checkpoints
  migrate   upgrade a database written by an older server line (the
            reference 0.15 to 0.20 line) to what this build needs, adding
            columns without rewriting data (-dry-run lists the changes)
  checkpoint declare -name N -version V [-yes]
            declare a backfill checkpoint (raises the writer fence: asks
            first, since older running writers are then refused)
  backfill -name N -sources t1,t2 -no-projection
            walk a checkpoint's source log with a progress bar (resumable)
            and activate it; projections run in the embedding process
  reactions backlog | list | retry | drop
            durable reactions: the backlog, dead letters, an operator's
            retry or drop (syncgo reactions help)
  epoch rotate
            give partitions a new log epoch after a restore of a backup:
            their clients bootstrap again (syncgo epoch help)
  import    push the rows of a JSON Lines file to a server as commits,
            idempotent by name (syncgo import -h)
  export    write a table's rows in one partition as JSON Lines, read
            from the database (syncgo export -h)
  render    print the canonical JSON rendering (§11.1) of an SSP2 message,
            rows segment or sparse row read from a file or stdin
  conformance
            start conformance mode, the test-control surface of the
            conformance harness (loopback only; prints READY <port>)
  bench     drive virtual clients against a server and report throughput,
            latency and memory figures (syncgo bench -h)
  version   print the module version, the commit and the Go version
  help      show this text
`

// Run executes the command line args and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "config":
		return runConfig(args[1:], stdout, stderr)
	case "render":
		return runRender(args[1:], stdin, stdout, stderr)
	case "schema":
		return runSchema(ctx, args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		return runCheckpoint(ctx, args[1:], stdin, stdout, stderr)
	case "backfill":
		return runBackfill(ctx, args[1:], stdout, stderr)
	case "conformance":
		return runConformance(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "reactions":
		return runReactions(ctx, args[1:], stdout, stderr)
	case "epoch":
		return runEpoch(ctx, args[1:], stdin, stdout, stderr)
	case "import":
		return runImport(ctx, args[1:], stdin, stdout, stderr)
	case "export":
		return runExport(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "syncgo: unknown command %q\n\n%s", args[0], usage)
	return 2
}
