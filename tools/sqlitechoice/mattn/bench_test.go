//go:build cgo

package mattn

import (
	"os"
	"testing"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3" (cgo)

	sc "github.com/syncgo/syncgo/tools/sqlitechoice"
)

var mattn = sc.Driver{
	Name: "mattn",
	Open: func(p string) (sc.Conn, error) { return sc.OpenSQL("sqlite3", p) },
}

func TestMain(m *testing.M) { os.Exit(sc.RunMain(m)) }

func TestDriver(t *testing.T) { sc.CheckDriver(t, mattn) }

func run(b *testing.B, i int) {
	bm := sc.Benchmarks()[i]
	b.Run(mattn.Name, func(b *testing.B) { bm.Fn(b, mattn) })
}

// Same names as the root package's benchmarks, so the outputs merge.

func BenchmarkAppend1(b *testing.B)       { run(b, 0) }
func BenchmarkAppend10(b *testing.B)      { run(b, 1) }
func BenchmarkGroupCommit64(b *testing.B) { run(b, 2) }
func BenchmarkRawTx(b *testing.B)         { run(b, 3) }
func BenchmarkRead100k(b *testing.B)      { run(b, 4) }
func BenchmarkApplyNoSync(b *testing.B)   { run(b, 5) }
