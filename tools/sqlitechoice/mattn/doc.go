// Package mattn holds the benchmark of the cgo candidate,
// github.com/mattn/go-sqlite3. It is a separate test binary from the pure-Go
// candidates because mattn's database/sql driver registers the name
// "sqlite3", as ncruces' does, and database/sql panics on a duplicate
// registration. The benchmarks only build with cgo enabled (they are skipped
// with CGO_ENABLED=0).
package mattn
