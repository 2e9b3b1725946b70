package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/store"
)

// syncgo reactions on both drivers: backlog and list read (a read-only
// database session suffices), retry makes a dead letter pending again,
// drop deletes one, and both refuse what is not a dead letter.
func TestReactionsCommands(t *testing.T) {
	forEachOperatorDriver(t, func(t *testing.T, d opDB) {
		ctx := context.Background()
		st, err := openStore(ctx, d.db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rs := st.(store.ReactionStore)
		now := time.Now().UnixMilli()
		var planned []store.NewReaction
		for i := range 3 {
			planned = append(planned, store.NewReaction{IdempotencyKey: store.ReactionIdempotencyKey("default", "c", "cc", fmt.Sprint(i)),
				Type: "mail", Version: 1, Payload: []byte(`{}`), SourceClientID: "c", SourceClientCommitID: "cc", SourceCommitSeq: 1,
				CreatedAtMs: now - 60_000, MaxAttempts: 1})
		}
		if err := st.Write(ctx, "default", func(ctx context.Context, tx store.WriteTx) error {
			return tx.(store.ReactionTx).EnqueueReactions(ctx, planned)
		}); err != nil {
			t.Fatal(err)
		}
		claimed, err := rs.ClaimReactions(ctx, store.ReactionClaim{Owner: "w", Types: []string{"mail"}, NowMs: now, LeaseUntilMs: now + 60_000, Limit: 2})
		if err != nil || len(claimed) != 2 {
			t.Fatalf("claim: %v, %d", err, len(claimed))
		}
		for _, r := range claimed {
			if ok, err := rs.FailReaction(ctx, "default", r.IdempotencyKey, "w", store.ReactionFailure{Code: "app.smtp_down", AtMs: now}); !ok || err != nil {
				t.Fatalf("fail: %v %v", ok, err)
			}
		}
		dead, other := claimed[0].IdempotencyKey, claimed[1].IdempotencyKey

		code, out, errOut := run(t, "", "reactions", "backlog", "-db", d.readOnlyDB)
		if code != 0 {
			t.Fatalf("backlog: exit %d: %s", code, errOut)
		}
		wantOutput(t, "backlog", out, "pending: 1\n", "running: 0\n", "dead letters: 2\n", "oldest pending: 1m")
		code, out, errOut = run(t, "", "reactions", "list", "-db", d.readOnlyDB)
		if code != 0 {
			t.Fatalf("list: exit %d: %s", code, errOut)
		}
		wantOutput(t, "list", out, "PARTITION", dead, other, "dead-letter", "1/1", "app.smtp_down at ")
		if strings.Count(out, "\n") != 3 {
			t.Errorf("list prints %d lines; want a header and the 2 dead letters:\n%s", strings.Count(out, "\n"), out)
		}
		_, out, _ = run(t, "", "reactions", "list", "-db", d.readOnlyDB, "-state", "all", "-partition", "default")
		if strings.Count(out, "\n") != 4 {
			t.Errorf("list -state all prints:\n%s", out)
		}

		code, out, errOut = run(t, "", "reactions", "retry", "-db", d.db, "-partition", "default", "-key", dead)
		if code != 0 {
			t.Fatalf("retry: exit %d: %s", code, errOut)
		}
		wantOutput(t, "retry", out, "retried")
		code, out, errOut = run(t, "", "reactions", "drop", "-db", d.db, "-partition", "default", "-key", other)
		if code != 0 {
			t.Fatalf("drop: exit %d: %s %s", code, out, errOut)
		}
		list, err := rs.ListReactions(ctx, store.ReactionQuery{})
		if err != nil || len(list) != 2 {
			t.Fatalf("after retry and drop: %v, %d reactions; want 2", err, len(list))
		}
		for _, r := range list {
			if r.State != store.ReactionPending || r.IdempotencyKey == other {
				t.Errorf("after retry and drop: %+v", r)
			}
		}
		// Neither touches what is not a dead letter.
		for _, sub := range []string{"retry", "drop"} {
			if code, _, errOut := run(t, "", "reactions", sub, "-db", d.db, "-partition", "default", "-key", dead); code != 1 ||
				!strings.Contains(errOut, "no dead letter") {
				t.Errorf("%s of a pending reaction: exit %d: %s", sub, code, errOut)
			}
		}
		if code, _, _ := run(t, "", "reactions", "retry", "-db", d.db); code != 2 {
			t.Errorf("retry without -key: exit %d; want 2", code)
		}
		if code, _, _ := run(t, "", "reactions", "list", "-db", d.db, "-state", "odd"); code != 2 {
			t.Errorf("list -state odd: exit %d; want 2", code)
		}
	})
}
