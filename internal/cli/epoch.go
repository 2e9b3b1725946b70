package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/syncgo/syncgo/internal/config"
	"github.com/syncgo/syncgo/pgstore"
	"github.com/syncgo/syncgo/sqlitestore"
	"github.com/syncgo/syncgo/store"
)

const epochUsage = `usage: syncgo epoch rotate [-db DB] [-partition P]... [-yes] [-force]

Gives partitions a new log epoch (§2.1) after a restore of a backup, a
point-in-time recovery or a failover to a replica that was behind: every
client's next request is answered with resetRequired, so that it
bootstraps again and re-sends the commits it still holds instead of
keeping rows the restored database lost. The partitions' client records
are deleted, and wire-version-1 clients (which know no epoch) are refused
from then on. The partitions are rotated in one transaction: a rotation
killed or interrupted part-way rotates none of them.

Run it with every syncgo process on the database stopped, before any of
them serves it. It refuses while another connection has the database open
(-force rotates anyway).

flags:
  -db         SQLite file path or postgres:// URL (SYNCGO_DB)
  -partition  a partition to rotate (repeatable); every partition the
              database knows when absent
  -yes        do not ask for confirmation
  -force      rotate even if other connections to the database are seen
`

// partitionLister is what both drivers' stores offer the rotation.
type partitionLister interface {
	Partitions(ctx context.Context) ([]string, error)
}

// runEpoch runs syncgo epoch rotate.
func runEpoch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprint(stderr, epochUsage)
		return 2
	}
	fs := flag.NewFlagSet("epoch rotate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, epochUsage) }
	db := fs.String("db", envOr("SYNCGO_DB", "syncgo.db"), "SQLite file path or postgres:// URL (SYNCGO_DB)")
	var partitions stringList
	fs.Var(&partitions, "partition", "a partition to rotate (repeatable)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	force := fs.Bool("force", false, "rotate even if other connections to the database are seen")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "syncgo epoch rotate: %v\n", err)
		return 1
	}
	// failBefore reports an error before the rotation's transaction.
	failBefore := func(err error) int { return fail(fmt.Errorf("%w; nothing rotated", err)) }
	others, err := otherConnections(ctx, *db)
	if err != nil {
		return failBefore(err)
	}
	if len(others) > 0 {
		fmt.Fprintf(stderr, "syncgo epoch rotate: the database is open elsewhere:\n")
		for _, o := range others {
			fmt.Fprintf(stderr, "  %s\n", o)
		}
		if !*force {
			fmt.Fprintln(stderr, "Stop every syncgo process on it first (a process that served the restored database before the rotation may have answered clients with the old epoch); -force rotates anyway.")
			return 1
		}
	}
	st, err := openExistingStore(ctx, *db, false)
	if err != nil {
		return failBefore(err)
	}
	defer st.Close()
	targets := []string(partitions)
	if len(targets) == 0 {
		lister, ok := st.(partitionLister)
		if !ok {
			return failBefore(fmt.Errorf("this store cannot list its partitions: name them with -partition"))
		}
		if targets, err = lister.Partitions(ctx); err != nil {
			return failBefore(err)
		}
		if len(targets) == 0 {
			fmt.Fprintln(stdout, "no partitions: nothing to rotate")
			return 0
		}
	}
	fmt.Fprintf(stderr, "Rotating the log epoch of %d partition(s) of %s: every client of them bootstraps again on its next request, and their client records are deleted.\n",
		len(targets), config.RedactDSN(*db))
	if !*yes && !confirm(stdin, stderr, "Rotate?") {
		fmt.Fprintln(stderr, "syncgo epoch rotate: nothing rotated")
		return 1
	}
	rot, ok := st.(epochRotator)
	if !ok {
		return failBefore(fmt.Errorf("this store cannot rotate partitions together"))
	}
	olds := make(map[string]string, len(targets))
	epochs := make(map[string]string, len(targets))
	for _, p := range targets {
		before, err := st.Partition(ctx, p)
		switch {
		case errors.Is(err, store.ErrNotFound):
			olds[p] = "(none)"
		case err != nil:
			return failBefore(fmt.Errorf("partition %q: %w", p, err))
		default:
			olds[p] = before.LogEpoch
		}
		epochs[p] = newLogEpoch()
	}
	// One transaction: a rotation killed or interrupted part-way rotates
	// no partition, never some of them.
	if err := rot.RotateLogEpochs(ctx, epochs, time.Now().UnixMilli()); err != nil {
		// An interrupt or a lost connection can end the call after the
		// transaction committed: the answer is read from the database.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		part, rerr := st.Partition(rctx, targets[0])
		switch {
		case rerr != nil:
			return fail(fmt.Errorf("%w; whether the rotation committed is unknown (%v): run it again before starting any server", err, rerr))
		case part.LogEpoch != epochs[targets[0]]:
			return fail(fmt.Errorf("%w; nothing rotated", err))
		}
		fmt.Fprintf(stderr, "syncgo epoch rotate: %v, after the rotation committed\n", err)
	}
	for _, p := range targets {
		fmt.Fprintf(stdout, "partition %q: log epoch %s -> %s\n", p, olds[p], epochs[p])
	}
	return 0
}

// epochRotator is what both drivers' stores offer to rotate several
// partitions in one transaction.
type epochRotator interface {
	RotateLogEpochs(ctx context.Context, epochs map[string]string, nowMs int64) error
}

// otherConnections names the connections to db other than this command's
// own: Postgres sessions of the database, or, for SQLite, that some
// connection has the file open.
func otherConnections(ctx context.Context, db string) ([]string, error) {
	if config.IsPostgres(db) {
		// A session that a process has just closed stays in
		// pg_stat_activity until its backend exits: an operator who stops
		// the servers and rotates at once would be refused. Sessions seen
		// are looked at again for up to sessionGrace.
		deadline := time.Now().Add(sessionGrace)
		sessions, err := pgstore.OtherSessions(ctx, db)
		for err == nil && len(sessions) > 0 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			sessions, err = pgstore.OtherSessions(ctx, db)
		}
		if err != nil {
			return nil, err
		}
		out := make([]string, len(sessions))
		for i, s := range sessions {
			out[i] = fmt.Sprintf("session %d from %s, application %q, %s", s.PID, s.ClientAddr, s.ApplicationName, s.State)
		}
		return out, nil
	}
	busy, err := sqlitestore.InUse(db)
	if err != nil || !busy {
		return nil, err
	}
	return []string{"another connection has " + db + " open (a running server?)"}, nil
}

// sessionGrace is how long the rotation waits for other sessions of a
// Postgres database to end before it refuses.
const sessionGrace = 2 * time.Second

// newLogEpoch returns a fresh, unpredictable log epoch, as the engine
// makes them.
func newLogEpoch() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
