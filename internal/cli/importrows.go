package cli

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/syncgo/syncgo/producer"
	"github.com/syncgo/syncgo/schema"
	"github.com/syncgo/syncgo/wire"
)

const importUsage = `usage: syncgo import -url URL -table TABLE -id NAME [flags] [FILE]

Pushes the rows of a JSON Lines file (one JSON object per line, column
name to value; FILE or standard input) to an SSP2 server as ordinary
commits of up to -batch rows, through the same rules as any client's push
(package producer, docs/producers.md). Commit ids are NAME-<n>-<digest of
the table and the commit's lines>: running the same import again with the
same -id, file and -batch answers every commit "cached" and writes nothing
twice; a commit whose rows differ (another -batch, an edited file) is
written.

Values: JSON strings, numbers and booleans for their column types (a float
also "NaN", "Infinity" or "-Infinity"), any JSON value for a json column
(kept as its text), base64 text for bytes, null for NULL.

  -url URL          the server's base URL (its mount)
  -table TABLE      the table the rows go to
  -id NAME          the import's name: the prefix of its commit ids
  -schema FILE      the schema IR the server serves (default: the demo schema)
  -client-id ID     the producer's clientId (default syncgo-import)
  -token-file FILE  a file holding the bearer token (or SYNCGO_IMPORT_TOKEN)
  -batch N          rows per commit, 1 to 500 (default 200)
`

func runImport(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, importUsage) }
	url := fs.String("url", "", "")
	table := fs.String("table", "", "")
	name := fs.String("id", "", "")
	schemaPath := fs.String("schema", "", "")
	clientID := fs.String("client-id", "syncgo-import", "")
	tokenFile := fs.String("token-file", "", "")
	batch := fs.Int("batch", 200, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *url == "" || *table == "" || *name == "" || *batch < 1 || *batch > 500 || fs.NArg() > 1 {
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "syncgo import: %v\n", err)
		return 1
	}
	sc, t, err := schemaTable(*schemaPath, *table)
	if err != nil {
		return fail(err)
	}
	token := os.Getenv("SYNCGO_IMPORT_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fail(err)
		}
		token = strings.TrimSpace(string(b))
	}
	in := stdin
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		in = f
	}
	p, err := producer.New(producer.Config{URL: *url, Schema: sc, ClientID: *clientID,
		Token: func(context.Context) (string, error) { return token, nil }})
	if err != nil {
		return fail(err)
	}
	var counts struct{ rows, sent, applied, cached, rejected int }
	var ops []producer.Op
	digest := newBatchDigest(*table)
	commit := 0
	// refused is set when the server refused the last commit sent (a
	// producer.Error Push returned as it came, not retryable): it was
	// not written.
	refused := false
	// stopped reports a run that ends early (an interrupt, an unreachable
	// server, a bad line) with what it wrote before, so that the operator
	// knows where it stands and how to finish.
	stopped := func(err error) int {
		fmt.Fprintf(stderr, "syncgo import: %v\n", err)
		fmt.Fprintf(stderr, "syncgo import: stopped after %d rows in %d commits: %d applied, %d cached (already imported), %d rejected",
			counts.sent, counts.applied+counts.cached+counts.rejected, counts.applied, counts.cached, counts.rejected)
		switch inFlight := commit - (counts.applied + counts.cached + counts.rejected); {
		case inFlight > 0 && refused:
			fmt.Fprintf(stderr, "; commit %d was refused, nothing of it written", commit)
		case inFlight > 0:
			fmt.Fprintf(stderr, "; commit %d was sent and may have been written", commit)
		}
		fmt.Fprintln(stderr, "; running the import again with the same -id and -batch writes only what is missing")
		return 1
	}
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		commit++
		id := *name + "-" + strconv.Itoa(commit) + "-" + digest.sum()
		res, err := p.Push(ctx, id, ops...)
		if err != nil {
			pe, ok := err.(*producer.Error)
			refused = ok && !pe.Retryable
			return fmt.Errorf("commit %s: %w", id, err)
		}
		counts.sent += len(ops)
		switch res.Status {
		case wire.PushApplied:
			counts.applied++
		case wire.PushCached:
			counts.cached++
		default:
			counts.rejected++
			for _, r := range res.Results {
				if r.Status != wire.OpApplied {
					fmt.Fprintf(stderr, "commit %s rejected: row %d of the commit: %s %s\n", id, r.OpIndex+1, r.Code, r.Message)
				}
			}
		}
		ops = ops[:0]
		return nil
	}
	sc2 := bufio.NewScanner(in)
	sc2.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc2.Scan() {
		line++
		text := strings.TrimSpace(sc2.Text())
		if text == "" {
			continue
		}
		values, err := t.JSONValues([]byte(text))
		if err != nil {
			return stopped(fmt.Errorf("line %d: %w", line, err))
		}
		ops = append(ops, producer.Upsert(*table, values))
		digest.add(text)
		counts.rows++
		if len(ops) == *batch {
			if err := flush(); err != nil {
				return stopped(err)
			}
		}
	}
	if err := sc2.Err(); err != nil {
		return stopped(fmt.Errorf("line %d: %w", line+1, err))
	}
	if err := flush(); err != nil {
		return stopped(err)
	}
	fmt.Fprintf(stdout, "imported %d rows into %s in %d commits: %d applied, %d cached (already imported), %d rejected\n",
		counts.rows, *table, commit, counts.applied, counts.cached, counts.rejected)
	if counts.rejected > 0 {
		return 1
	}
	return 0
}

// schemaTable loads the schema IR file (empty: the demo schema) and finds
// a table of it.
func schemaTable(path, table string) (*schema.Compiled, *schema.CompiledTable, error) {
	sc, err := loadSchema(path)
	if err != nil {
		return nil, nil, err
	}
	t, ok := sc.Table(table)
	if !ok {
		return nil, nil, fmt.Errorf("the schema has no table %q", table)
	}
	return sc, t, nil
}

// batchDigest names the rows of one import commit: the commit id carries
// it, so that a commit id is answered "cached" only for the same rows of
// the same table. With the commit's number alone, a run resumed with
// another -batch (or an edited file) had its first commits answered
// "cached" for other rows, and the rows between were never written.
type batchDigest struct {
	table string
	h     hash.Hash
}

func newBatchDigest(table string) *batchDigest {
	d := &batchDigest{table: table, h: sha256.New()}
	d.reset()
	return d
}

func (d *batchDigest) reset() {
	d.h.Reset()
	d.h.Write([]byte(d.table))
	d.h.Write([]byte{0})
}

// add adds one row's line (trimmed, as parsed).
func (d *batchDigest) add(line string) {
	d.h.Write([]byte(line))
	d.h.Write([]byte{'\n'})
}

// sum returns the digest of the rows added since the last sum, in 12 hex
// digits, and starts the next commit's.
func (d *batchDigest) sum() string {
	s := hex.EncodeToString(d.h.Sum(nil))[:12]
	d.reset()
	return s
}
