package store

import "time"

// PoolStats is a snapshot of a driver's database connection pool, in the
// spirit of database/sql's DBStats. Counters only grow.
type PoolStats struct {
	// MaxConns is the pool's capacity.
	MaxConns int32
	// TotalConns counts the open connections: AcquiredConns in use,
	// IdleConns waiting, ConstructingConns being opened.
	TotalConns        int32
	AcquiredConns     int32
	IdleConns         int32
	ConstructingConns int32
	// AcquireCount counts successful acquisitions, AcquireDuration their
	// total time.
	AcquireCount    int64
	AcquireDuration time.Duration
	// EmptyAcquireCount counts acquisitions that waited for a connection
	// because none was idle, EmptyAcquireWait their total wait.
	EmptyAcquireCount int64
	EmptyAcquireWait  time.Duration
	// CanceledAcquireCount counts acquisitions given up (context ended).
	CanceledAcquireCount int64
	// NewConns counts connections opened.
	NewConns int64
}

// PoolReporter is implemented by drivers with a connection pool
// (pgstore): metrics report its state.
type PoolReporter interface {
	PoolStats() PoolStats
}
