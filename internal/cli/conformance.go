package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/syncgo/syncgo/internal/conformance"
)

// runConformance starts conformance mode: syncgo conformance --listen
// 127.0.0.1:0. It serves until ctx ends (SIGINT or SIGTERM).
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to listen on; the port is announced as READY <port>")
	postgres := fs.String("postgres", os.Getenv("SYNCGO_CONFORMANCE_POSTGRES"),
		"URL of a Postgres database to run every instance in, on schemas of its own, instead of SQLite files (default $SYNCGO_CONFORMANCE_POSTGRES)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "syncgo conformance: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	logger.Warn("CONFORMANCE MODE: a test facility with trusted bearer actors and throw-away instances; never run it in production")
	if err := conformance.Run(ctx, conformance.Config{Listen: *listen, Stdout: stdout, Logger: logger, Postgres: *postgres}); err != nil {
		fmt.Fprintln(stderr, "syncgo conformance:", err)
		return 1
	}
	return 0
}
