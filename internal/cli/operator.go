package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/store"
)

// operatorFlags are the flags every operator command shares.
type operatorFlags struct {
	db        string
	partition string
}

func (o *operatorFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.db, "db", envOr("SYNCGO_DB", "syncgo.db"), "SQLite file path or postgres:// URL (SYNCGO_DB)")
	fs.StringVar(&o.partition, "partition", "default", "partition")
}

func openBarrier(ctx context.Context, db string) (store.Store, store.Barrier, error) {
	return openBarrierMode(ctx, db, false)
}

// openBarrierMode opens the store, read-only when asked (no DDL, no
// writes: a missing SQLite file is an error, never created).
func openBarrierMode(ctx context.Context, db string, readOnly bool) (store.Store, store.Barrier, error) {
	var st store.Store
	var err error
	if readOnly {
		st, err = openStoreReadOnly(ctx, db)
	} else {
		st, err = openExistingStore(ctx, db, false)
	}
	if err != nil {
		return nil, nil, err
	}
	b, ok := st.(store.Barrier)
	if !ok {
		st.Close()
		return nil, nil, errors.New("this store has no migration barrier")
	}
	return st, b, nil
}

// runSchema reports, reading only, the stored and the running schema, what
// a process of this build would do at start, what a request and a push
// to it would get, and the checkpoints.
func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	schemaFile := fs.String("schema", envOr("SYNCGO_SCHEMA", ""), "schema IR JSON file of the running build; default the demo schema")
	var checkpoints stringList
	fs.Var(&checkpoints, "checkpoint", "a checkpoint partition/name the running build declares (as serve -checkpoint; repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	running, err := loadSchema(*schemaFile)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	decls, err := declarations(checkpoints, running.Version())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 2
	}
	st, b, err := openBarrierMode(ctx, o.db, true)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	defer st.Close()
	m, err := st.Marker(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		fmt.Fprintln(stdout, "stored schema: none (the database has no app tables yet)")
	case err != nil:
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	default:
		fmt.Fprintf(stdout, "stored schema: version %d\n", m.SchemaVersion)
		for _, t := range m.Layout {
			cols := make([]string, len(t.Columns))
			for i, c := range t.Columns {
				cols[i] = c.Name + " " + c.Type.String()
				if c.Nullable {
					cols[i] += "?"
				}
			}
			fmt.Fprintf(stdout, "  %s(%s)\n", t.Table, strings.Join(cols, ", "))
		}
	}
	fmt.Fprintf(stdout, "running schema: version %d\n", running.Version())

	startOK := true
	if in, ok := st.(store.Inspector); ok {
		plan, err := in.PlanSchema(ctx, running, decls)
		if err != nil {
			fmt.Fprintln(stderr, "syncgo schema:", err)
			return 1
		}
		switch plan.Action {
		case store.SchemaNone:
			if len(plan.Upgrade) == 0 {
				fmt.Fprintln(stdout, "start: ready (the database holds the running layout; nothing to write)")
				break
			}
			fmt.Fprintln(stdout, "start: ready once it adds what this build's core layout lacks (no data is rewritten):")
			for _, l := range plan.Upgrade {
				fmt.Fprintln(stdout, "  "+l)
			}
		case store.SchemaCreate:
			fmt.Fprintln(stdout, "start: creates the app tables and the schema marker")
		case store.SchemaMigrate:
			fmt.Fprintf(stdout, "start: migrates to version %d (append-only) and raises every partition's writer fence to %d; older processes stop serving\n",
				running.Version(), running.Version())
		case store.SchemaUpgradeNeeded:
			startOK = false
			fmt.Fprintf(stdout, "start: refused until `syncgo migrate` runs (%v)\n", plan.Refusal)
			for _, l := range plan.Upgrade {
				fmt.Fprintln(stdout, "  "+l)
			}
		default:
			startOK = false
			fmt.Fprintf(stdout, "start: refused: %v\n", plan.Refusal)
		}
	}

	gate, err := b.ReadServeGate(ctx, o.partition, running.Version())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	var undeclared []string
	for _, p := range gate.Pending {
		if !slices.ContainsFunc(decls, func(d store.CheckpointDeclaration) bool { return d.Partition == p.Partition && d.Name == p.Name }) {
			undeclared = append(undeclared, p.Partition+"/"+p.Name)
		}
	}
	requests := "ready"
	switch {
	case !startOK:
		requests = "sync.schema_not_ready (the process does not start)"
	case gate.StoredSchemaVersion > running.Version():
		requests = fmt.Sprintf("sync.schema_not_ready (the database is at version %d, newer than this build)", gate.StoredSchemaVersion)
	case len(undeclared) > 0:
		requests = fmt.Sprintf("sync.schema_not_ready (incomplete checkpoint(s) at version %d not declared by this build: %s)",
			running.Version(), strings.Join(undeclared, ", "))
	}
	fmt.Fprintf(stdout, "requests to partition %q: %s\n", o.partition, requests)
	pushes := "accepted"
	switch {
	case requests != "ready":
		pushes = "refused (as requests)"
	case gate.WriterFence > running.Version():
		pushes = fmt.Sprintf("sync.schema_not_ready (the writer fence requires version %d)", gate.WriterFence)
	}
	fmt.Fprintf(stdout, "pushes to partition %q: %s (writer fence %d)\n", o.partition, pushes, gate.WriterFence)

	cps, err := b.ReadCheckpoints(ctx, o.partition)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checkpoints of partition %q: %d\n", o.partition, len(cps))
	for _, c := range cps {
		fmt.Fprintf(stdout, "  %s  version %d  %s  watermark %d  owner %d  rows %d\n",
			c.Name, c.SchemaVersion, c.State, c.Watermark, c.OwnerEpoch, c.ObservedRows)
	}
	return 0
}

// runCheckpoint declares a checkpoint: its row and the writer fence. A
// declaration that raises the fence stops the running writers of older
// versions, so it asks for confirmation unless -yes.
func runCheckpoint(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "declare" {
		fmt.Fprintln(stderr, "usage: syncgo checkpoint declare -name NAME -version N [-yes] [-db ...] [-partition ...]")
		return 2
	}
	fs := flag.NewFlagSet("checkpoint declare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	name := fs.String("name", "", "checkpoint (projection) name")
	version := fs.Int("version", 0, "schema version that needs the checkpoint")
	yes := fs.Bool("yes", false, "do not ask before raising the writer fence")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *name == "" || *version < 1 {
		fmt.Fprintln(stderr, "syncgo checkpoint declare: -name and -version are required")
		return 2
	}
	st, b, err := openBarrier(ctx, o.db)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo checkpoint:", err)
		return 1
	}
	defer st.Close()
	before, err := b.ReadServeGate(ctx, o.partition, int32(*version))
	if err != nil {
		fmt.Fprintln(stderr, "syncgo checkpoint:", err)
		return 1
	}
	if int32(*version) > before.WriterFence {
		fmt.Fprintf(stderr, "Declaring %s raises the writer fence of partition %q from %d to %d: from then on, processes running a "+
			"schema version below %d (the database is at version %d) can no longer commit in that partition; their pushes are "+
			"refused with sync.schema_not_ready until they are upgraded.\n",
			*name, o.partition, before.WriterFence, *version, *version, before.StoredSchemaVersion)
		if !*yes && !confirm(stdin, stderr, "Raise the fence?") {
			fmt.Fprintln(stderr, "syncgo checkpoint: not declared")
			return 1
		}
	}
	cp, err := b.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: o.partition, Name: *name, SchemaVersion: int32(*version)}, time.Now().UnixMilli())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo checkpoint:", err)
		return 1
	}
	after, err := b.ReadServeGate(ctx, o.partition, cp.SchemaVersion)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo checkpoint:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checkpoint %s (version %d) is %s; writer fence of partition %q: %d (was %d)\n",
		cp.Name, cp.SchemaVersion, cp.State, o.partition, after.WriterFence, before.WriterFence)
	return 0
}

// confirm asks a yes/no question on stderr and reads the answer from
// stdin; anything but y or yes (or no answer) is no.
func confirm(stdin io.Reader, stderr io.Writer, question string) bool {
	fmt.Fprintf(stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// runBackfill claims a checkpoint, walks its source log from the stored
// watermark with a progress bar, and activates it.
func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	name := fs.String("name", "", "checkpoint name")
	sources := fs.String("sources", "", "comma-separated source tables")
	batch := fs.Int("batch", 500, "source commits per batch")
	noProjection := fs.Bool("no-projection", false, "the checkpoint needs no projection: walk the source log and activate it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *name == "" || *sources == "" {
		fmt.Fprintln(stderr, "syncgo backfill: -name and -sources are required")
		return 2
	}
	if !*noProjection {
		fmt.Fprintln(stderr, "syncgo backfill: the command line runs no projection, so it would activate the checkpoint "+
			"without writing any projected row. Run the backfill from the process that declares the projection "+
			"(syncgo.RunBackfill with Project), or pass -no-projection if this checkpoint needs none.")
		return 2
	}
	st, _, err := openBarrier(ctx, o.db)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo backfill:", err)
		return 1
	}
	defer st.Close()
	bar := &progressBar{w: stderr}
	cp, err := syncgo.RunBackfill(ctx, st, syncgo.Backfill{
		Partition: o.partition, Name: *name, Sources: strings.Split(*sources, ","), BatchCommits: *batch,
		Progress: bar.update,
	})
	bar.done()
	if err != nil {
		fmt.Fprintln(stderr, "syncgo backfill:", err, backfillHint(err))
		return 1
	}
	fmt.Fprintf(stdout, "checkpoint %s %s at watermark %d (%d rows observed)\n", cp.Name, cp.State, cp.Watermark, cp.ObservedRows)
	return 0
}

// backfillHint says what to do after a failed backfill: run it again only
// when that resumes it.
func backfillHint(err error) string {
	switch {
	case store.ErrorCode(err) == store.CodeCheckpointNotDeclared:
		return "(declare it first: syncgo checkpoint declare)"
	case errors.Is(err, syncgo.ErrBackfillSuperseded):
		return "(another backfill of this checkpoint claimed it since and goes on; see syncgo schema)"
	case errors.Is(err, syncgo.ErrBackfillUnverifiable):
		return "(running it again cannot complete it: the source commits it has not read are no longer in the log)"
	}
	return "(run the command again to resume from the stored watermark)"
}

// progressBar draws one status line on a terminal-ish writer.
type progressBar struct {
	w    io.Writer
	last time.Time
	used bool
}

func (p *progressBar) update(pr syncgo.BackfillProgress) {
	if time.Since(p.last) < 100*time.Millisecond && pr.Watermark < pr.Target {
		return
	}
	p.last, p.used = time.Now(), true
	const width = 30
	filled := width
	if pr.Target > 0 {
		filled = int(float64(width) * float64(pr.Watermark) / float64(pr.Target))
	}
	filled = min(max(filled, 0), width)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d commits  %d rows", strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		pr.Watermark, pr.Target, pr.ObservedRows)
}

func (p *progressBar) done() {
	if p.used {
		fmt.Fprintln(p.w)
	}
}

// runMigrate brings a database written by an older server line (the
// reference 0.15 to 0.20 line, or an older syncgo) to what this build
// needs, without rewriting data: columns are added, nothing is dropped,
// client cursors and the commit log stay valid. -dry-run lists what it
// would do, reading only.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	schemaFile := fs.String("schema", envOr("SYNCGO_SCHEMA", ""), "schema IR JSON file of the running build; default the demo schema")
	dryRun := fs.Bool("dry-run", false, "only list what would be done")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	running, err := loadSchema(*schemaFile)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo migrate:", err)
		return 1
	}
	var st store.Store
	st, err = openExistingStore(ctx, o.db, *dryRun)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo migrate:", err)
		return 1
	}
	defer st.Close()
	var lines []string
	if *dryRun {
		in, ok := st.(store.Inspector)
		if !ok {
			fmt.Fprintln(stderr, "syncgo migrate: this store cannot plan")
			return 1
		}
		plan, err := in.PlanSchema(ctx, running, nil)
		if err != nil {
			fmt.Fprintln(stderr, "syncgo migrate:", err)
			return 1
		}
		if plan.Action == store.SchemaRefuse && store.ErrorCode(plan.Refusal) != store.CodeCheckpointIncomplete {
			// migrate would refuse the same way and change nothing. It
			// does not consult the checkpoints (it serves nothing), so
			// an incomplete one refuses a start, not an upgrade.
			fmt.Fprintln(stderr, "syncgo migrate: would refuse:", plan.Refusal)
			return 1
		}
		lines = plan.Upgrade
	} else {
		up, ok := st.(store.Upgrader)
		if !ok {
			fmt.Fprintln(stderr, "syncgo migrate: this store cannot upgrade")
			return 1
		}
		if lines, err = up.Upgrade(ctx, running); err != nil {
			fmt.Fprintln(stderr, "syncgo migrate:", err)
			if left := upgradeLeft(ctx, st, running); left != "" {
				fmt.Fprintln(stderr, "syncgo migrate:", left)
			}
			return 1
		}
	}
	if len(lines) == 0 {
		fmt.Fprintln(stdout, "nothing to upgrade: the database has every column this build needs")
		return 0
	}
	verb := "upgraded"
	if *dryRun {
		verb = "would upgrade"
	}
	fmt.Fprintf(stdout, "%s (%d change(s), no data rewritten):\n", verb, len(lines))
	for _, l := range lines {
		fmt.Fprintln(stdout, "  "+l)
	}
	return 0
}

// upgradeLeft tells, after a failed or interrupted Upgrade, what it left
// ("" for a refusal, which changes nothing and says why itself):
// the upgrade is one transaction, committed whole or not at all, and an
// interrupt can land after its commit, so the database is asked.
func upgradeLeft(ctx context.Context, st store.Store, running *schema.Compiled) string {
	const again = "run syncgo migrate again: it does only what is left"
	in, ok := st.(store.Inspector)
	if !ok {
		return again
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	plan, err := in.PlanSchema(rctx, running, nil)
	switch {
	case err != nil:
		return "whether the upgrade committed is unknown (" + err.Error() + "); " + again
	case plan.Action == store.SchemaRefuse:
		return "" // refused as the error says, nothing changed
	case len(plan.Upgrade) == 0:
		return "the upgrade committed before the error: nothing is left to do"
	default:
		return "nothing was changed; " + again
	}
}
