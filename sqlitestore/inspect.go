package sqlitestore

import (
	"context"
	"fmt"

	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

var (
	_ store.Inspector = (*Store)(nil)
	_ store.Upgrader  = (*Store)(nil)
)

// PlanSchema reports what EnsureSchemaWith(ctx, sc, decls) would do,
// reading one snapshot on a read connection and writing nothing (it works
// on a store opened with Config.ReadOnly). The Upgrade lines also name
// what a read-write open would do to the core tables, which a read-only
// store leaves as they are; after a read-write open there is none. A core
// table a read-write open would refuse is a SchemaRefuse plan.
func (s *Store) PlanSchema(ctx context.Context, sc *schema.Compiled, decls []store.CheckpointDeclaration) (store.SchemaPlan, error) {
	cs := newCompiledSchema(sc)
	var out store.SchemaPlan
	err := s.readTx(ctx, func(c *conn) error {
		core, err := planCore(c)
		if err != nil {
			if store.ErrorCode(err) != "" {
				out = store.SchemaPlan{Action: store.SchemaRefuse, Refusal: err}
				return nil
			}
			return err
		}
		plan, err := planSchemaOn(c, cs, decls, true)
		if err != nil {
			return err
		}
		out = store.SchemaPlan{Action: plan.action, Refusal: plan.refusal, Upgrade: stepLines(append(core, plan.upgrade...))}
		return nil
	})
	if err != nil {
		return store.SchemaPlan{}, fmt.Errorf("plan schema: %w", err)
	}
	return out, nil
}

// Upgrade brings a database an older server line wrote to what this build
// needs for sc without rewriting data (see planUpgrade; the core tables
// too, which a read-write open has already done), in one writer function:
// one transaction that no write interleaves with. It returns the lines of
// what it did, the ones PlanSchema lists; a second call does nothing and
// returns none. A database EnsureSchemaWith would refuse for another
// reason (a newer marker, another stored layout, a missing app column) is
// refused the same way and left alone; the checkpoints are not consulted.
func (s *Store) Upgrade(ctx context.Context, sc *schema.Compiled) ([]string, error) {
	cs := newCompiledSchema(sc)
	// First on a read connection: a database with nothing to add is
	// answered without the write lock, which would hold the writers of
	// the processes serving it (and wait behind their transactions).
	var pending bool
	err := s.readTx(ctx, func(c *conn) error {
		steps, err := upgradeSteps(c, cs)
		pending = len(steps) > 0
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	if !pending {
		return nil, nil
	}
	var done []string
	err = s.w.do(ctx, func(ctx context.Context, c *conn) error {
		s.w.dropRecent = true // the log changes under the recent commits (recent.go)
		done = nil
		defer c.forget()
		steps, err := upgradeSteps(c, cs)
		if err != nil {
			return err
		}
		for _, st := range steps {
			if err := c.execScript(st.sql); err != nil {
				return fmt.Errorf("%s: %w", st.line, err)
			}
		}
		done = stepLines(steps)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upgrade: %w", err)
	}
	return done, nil
}

// upgradeSteps plans what Upgrade adds on c: the core steps, then the app
// tables'; a database EnsureSchemaWith would refuse is refused.
func upgradeSteps(c *conn, cs *compiledSchema) ([]ddlStep, error) {
	core, err := planCore(c)
	if err != nil {
		return nil, err
	}
	plan, err := planSchemaOn(c, cs, nil, false)
	if err != nil {
		return nil, err
	}
	if plan.action == store.SchemaRefuse {
		return nil, plan.refusal
	}
	app, err := planUpgrade(c, cs)
	if err != nil {
		return nil, err
	}
	return append(core, app...), nil
}

// HoldsCommitLog reports whether the database has a commit log
// (sync_commits), as every database syncgo or the reference server
// created has: operator commands that expect an existing sync database
// refuse one without it instead of creating the core tables in it.
// Reading only; it works on a store opened with Config.ReadOnly.
func (s *Store) HoldsCommitLog(ctx context.Context) (bool, error) {
	var n int64
	err := s.readTx(ctx, func(c *conn) error {
		return c.queryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sync_commits'`).Scan(&n)
	})
	if err != nil {
		return false, fmt.Errorf("read the catalog: %w", err)
	}
	return n > 0, nil
}
