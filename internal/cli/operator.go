package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/syncgo/syncgo"
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
	st, err := openStore(ctx, db, slog.New(slog.DiscardHandler))
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

// runSchema prints the schema marker, the serve gate and the checkpoints.
func runSchema(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	schemaFile := fs.String("schema", envOr("SYNCGO_SCHEMA", ""), "schema IR JSON file of the running build; default the demo schema")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	st, b, err := openBarrier(ctx, o.db)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	defer st.Close()
	running, err := loadSchema(*schemaFile)
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
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
	gate, err := b.ReadServeGate(ctx, o.partition, running.Version())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo schema:", err)
		return 1
	}
	ready := "ready"
	switch {
	case gate.StoredSchemaVersion > running.Version():
		ready = "not ready: the database is newer than this build"
	case len(gate.Pending) > 0:
		ready = fmt.Sprintf("not ready: %d checkpoint(s) at version %d incomplete (only declaring processes serve)", len(gate.Pending), running.Version())
	}
	fmt.Fprintf(stdout, "readiness: %s\n", ready)
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

// runCheckpoint declares a checkpoint: its row and the writer fence.
func runCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "declare" {
		fmt.Fprintln(stderr, "usage: syncgo checkpoint declare -name NAME -version N [-db ...] [-partition ...]")
		return 2
	}
	fs := flag.NewFlagSet("checkpoint declare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o operatorFlags
	o.register(fs)
	name := fs.String("name", "", "checkpoint (projection) name")
	version := fs.Int("version", 0, "schema version that needs the checkpoint")
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
	cp, err := b.DeclareCheckpoint(ctx, store.CheckpointDeclaration{Partition: o.partition, Name: *name, SchemaVersion: int32(*version)}, time.Now().UnixMilli())
	if err != nil {
		fmt.Fprintln(stderr, "syncgo checkpoint:", err)
		return 1
	}
	fmt.Fprintf(stdout, "checkpoint %s (version %d) is %s; writers below version %d are fenced off\n", cp.Name, cp.SchemaVersion, cp.State, cp.SchemaVersion)
	return 0
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
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *name == "" || *sources == "" {
		fmt.Fprintln(stderr, "syncgo backfill: -name and -sources are required")
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
		fmt.Fprintln(stderr, "syncgo backfill:", err, "(run the command again to resume from the stored watermark)")
		return 1
	}
	fmt.Fprintf(stdout, "checkpoint %s %s at watermark %d (%d rows observed)\n", cp.Name, cp.State, cp.Watermark, cp.ObservedRows)
	return 0
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
