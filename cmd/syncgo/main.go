// Command syncgo is the Syncular sync server and its tools.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/syncgo/syncgo/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
