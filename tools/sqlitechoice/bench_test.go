package sqlitechoice

import (
	"os"
	"testing"

	_ "github.com/ncruces/go-sqlite3/driver" // database/sql driver "sqlite3"
	_ "modernc.org/sqlite"                   // database/sql driver "sqlite"
)

// The pure-Go candidates. The cgo candidate (mattn) is in ./mattn: its
// database/sql driver registers the same name as ncruces' ("sqlite3").
var drivers = []Driver{
	// modernc.org/sqlite: SQLite's C source machine-translated to Go (ccgo).
	{"modernc", func(p string) (Conn, error) { return OpenSQL("sqlite", p) }},
	// github.com/ncruces/go-sqlite3: SQLite compiled to Wasm, translated to Go (wasm2go).
	{"ncruces", func(p string) (Conn, error) { return OpenSQL("sqlite3", p) }},
	// Native (non database/sql) APIs, to see the database/sql overhead.
	{"zombiezen-direct", openZombiezen}, // zombiezen.com/go/sqlite, on modernc's translated C
	{"ncruces-direct", openNcruces},     // github.com/ncruces/go-sqlite3's own API
}

func TestMain(m *testing.M) { os.Exit(RunMain(m)) }

func TestDrivers(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.Name, func(t *testing.T) { CheckDriver(t, d) })
	}
}

func runAll(b *testing.B, fn func(*testing.B, Driver)) {
	for _, d := range drivers {
		b.Run(d.Name, func(b *testing.B) { fn(b, d) })
	}
}

func BenchmarkAppend1(b *testing.B)       { runAll(b, Benchmarks()[0].Fn) }
func BenchmarkAppend10(b *testing.B)      { runAll(b, Benchmarks()[1].Fn) }
func BenchmarkGroupCommit64(b *testing.B) { runAll(b, Benchmarks()[2].Fn) }
func BenchmarkRawTx(b *testing.B) {
	runAll(b, Benchmarks()[3].Fn)
	b.Run("os-fdatasync", benchFdatasync)
}
func BenchmarkRead100k(b *testing.B)    { runAll(b, Benchmarks()[4].Fn) }
func BenchmarkApplyNoSync(b *testing.B) { runAll(b, Benchmarks()[5].Fn) }
