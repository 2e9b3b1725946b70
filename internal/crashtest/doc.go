// Package crashtest holds the crash suite (crash_test.go, build tag
// "crash"): concurrent pushes against a real `syncgo serve` process that is
// killed with SIGKILL at random moments and restarted, checking after every
// kill that every acknowledged commit is in the log exactly once, that no
// retried commit applied twice, that commit sequences are dense and, on
// SQLite, that PRAGMA integrity_check passes.
//
//	go test -tags crash ./internal/crashtest -cycles 50 -driver sqlite
//	go test -tags crash ./internal/crashtest -cycles 20 -driver postgres   # needs SYNCGO_TEST_POSTGRES_URL
//	go test -tags crash ./internal/crashtest -cycles 5 -driver both -seed 42 -v
//
// The package has no code outside its tagged test file.
package crashtest
