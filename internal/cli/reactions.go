package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/syncgo/syncgo/reaction"
	"github.com/syncgo/syncgo/store"
)

const reactionsUsage = `usage: syncgo reactions <command> [flags]

commands:
  backlog   count the reactions not completed (pending, running, dead
            letters) and the age of the oldest pending one
  list      list reactions, dead letters by default (-state, -partition, -limit)
  retry     make a dead letter pending again, due now, attempts cleared
            (-partition P -key K)
  drop      delete a dead letter (-partition P -key K)
  rename    give the pending reactions and dead letters of a renamed
            handler (a webhook's name) its new name (-from OLD -to NEW)

Every command takes -db (SQLite file path or postgres:// URL; SYNCGO_DB).
backlog and list only read.
`

// runReactions runs the operator commands of durable reactions (§6.9).
func runReactions(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, reactionsUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("reactions "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", envOr("SYNCGO_DB", "syncgo.db"), "SQLite file path or postgres:// URL (SYNCGO_DB)")
	partition := fs.String("partition", "", "partition (list: every partition when empty)")
	key := fs.String("key", "", "the reaction's idempotency key, as list prints it")
	state := fs.String("state", string(store.ReactionDead), "list: pending, leased, completed, dead-letter, or all")
	limit := fs.Int("limit", 100, "list: at most this many (1-1000)")
	from := fs.String("from", "", "rename: the handler's old name")
	to := fs.String("to", "", "rename: the handler's new name")
	switch sub {
	case "backlog", "list", "retry", "drop", "rename":
	default:
		fmt.Fprintf(stderr, "syncgo reactions: unknown command %q\n\n%s", sub, reactionsUsage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "syncgo reactions %s: %v\n", sub, err)
		return 1
	}
	if (sub == "retry" || sub == "drop") && (*partition == "" || *key == "") {
		fmt.Fprintf(stderr, "syncgo reactions %s: -partition and -key are required\n", sub)
		return 2
	}
	if sub == "rename" {
		for _, n := range []string{*from, *to} {
			if err := reaction.CheckName(n); err != nil {
				fmt.Fprintf(stderr, "syncgo reactions rename: -from and -to: %v\n", err)
				return 2
			}
		}
		if *from == *to {
			fmt.Fprintf(stderr, "syncgo reactions rename: -from and -to are the same name\n")
			return 2
		}
	}
	var (
		st  store.Store
		err error
	)
	st, err = openExistingStore(ctx, *db, sub == "backlog" || sub == "list")
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	rs, ok := st.(store.ReactionStore)
	if !ok {
		return fail(fmt.Errorf("this store keeps no reactions"))
	}
	now := time.Now().UnixMilli()
	switch sub {
	case "backlog":
		b, err := rs.ReactionBacklog(ctx, now)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "pending: %d\nrunning: %d\ndead letters: %d\n", b.Pending, b.Running, b.Dead)
		if b.Pending > 0 && b.OldestPendingCreatedAtMs > 0 {
			fmt.Fprintf(stdout, "oldest pending: %v old\n", (time.Duration(now-b.OldestPendingCreatedAtMs) * time.Millisecond).Round(time.Second))
		}
	case "list":
		q := store.ReactionQuery{Partition: *partition, Limit: *limit}
		if *state != "all" {
			q.State = store.ReactionState(*state)
		}
		switch q.State {
		case "", store.ReactionPending, store.ReactionLeased, store.ReactionCompleted, store.ReactionDead:
		default:
			fmt.Fprintf(stderr, "syncgo reactions list: unknown state %q\n", *state)
			return 2
		}
		page, err := rs.ListReactions(ctx, q)
		if err != nil {
			return fail(err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tKEY\tNAME\tSTATE\tATTEMPTS\tCREATED\tLAST FAILURE")
		for _, r := range page {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.Partition, r.IdempotencyKey, r.Type, r.State, r.Attempts,
				r.MaxAttempts, time.UnixMilli(r.CreatedAtMs).UTC().Format(time.RFC3339), failureLine(r.LastFailure))
		}
		if err := tw.Flush(); err != nil {
			return fail(err)
		}
		if len(page) == store.ReactionPage(q) {
			fmt.Fprintln(stdout, "(more: raise -limit, or narrow with -partition)")
		}
	case "retry", "drop":
		var ok bool
		if sub == "retry" {
			ok, err = rs.RetryReaction(ctx, *partition, *key, now)
		} else {
			ok, err = rs.DropReaction(ctx, *partition, *key)
		}
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(fmt.Errorf("no dead letter %s in partition %q", *key, *partition))
		}
		verb := map[string]string{"retry": "retried (pending, due now)", "drop": "dropped"}[sub]
		fmt.Fprintf(stdout, "%s %s\n", verb, *key)
	case "rename":
		rn, ok := st.(store.ReactionRenamer)
		if !ok {
			return fail(fmt.Errorf("this store cannot rename reactions"))
		}
		r, err := rn.RenameReactions(ctx, *from, *to)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "renamed %s to %s: %d pending, %d dead letters\n", *from, *to, r.Pending, r.Dead)
		if r.Leased > 0 {
			fmt.Fprintf(stdout, "left under %s: %d leased by a runner (a process still running %s delivers them; "+
				"a lease that expires makes them pending again: run rename again then)\n", *from, r.Leased, *from)
		}
	}
	return 0
}

// failureLine renders a stored failure: its code and time.
func failureLine(b []byte) string {
	if b == nil {
		return "-"
	}
	var f struct {
		Code string `json:"code"`
		AtMs int64  `json:"atMs"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return string(b)
	}
	return f.Code + " at " + time.UnixMilli(f.AtMs).UTC().Format(time.RFC3339)
}
