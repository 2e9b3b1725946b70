package sqlitestore

import (
	"sync/atomic"
	"time"
)

// defaultIdleCheckpoint is Config.IdleCheckpoint's default. A burst of
// writes is often followed by reads of what it wrote (the clients pull
// it); a checkpoint 20 ms after the burst copied its pages beside those
// reads and slowed them (a SQLite image built right after seeding
// 100,000 rows: 289 -> 312 ms), so it waits for a second without writes.
const defaultIdleCheckpoint = time.Second

// checkpointer copies the WAL back into the database file once the writer
// has been idle for Config.IdleCheckpoint, on a connection of its own (a
// PASSIVE checkpoint: it takes no lock that a write or a read waits for).
// A checkpoint that a read held back from the WAL's end is not retried
// until the next writes go idle; the writer's own checkpoints bound the
// WAL meanwhile. The writer itself checkpoints only every
// Config.WALAutocheckpoint pages, so after a burst of writes most of what
// was written is still in the WAL, where every read looks each page up in
// the WAL index first; once the WAL is all copied, new read transactions
// read the database file alone, and the next write starts the WAL over.
// Under a steady stream of writes the writer is never idle that long and
// this does nothing.
type checkpointer struct {
	c     *conn
	after time.Duration // Config.IdleCheckpoint
	wake  chan struct{} // the writer went idle after committing
	quit  chan struct{}
	ended chan struct{}
	// batches is the writer's count of committed batches (Store.stats);
	// runs counts the checkpoints this ran.
	batches *atomic.Int64
	runs    atomic.Int64
	// frames and copied are the last checkpoint's WAL frames and the
	// frames copied of them (all, unless a read held some back).
	frames, copied atomic.Int64
}

func newCheckpointer(c *conn, batches *atomic.Int64, after time.Duration) *checkpointer {
	return &checkpointer{c: c, after: after, wake: make(chan struct{}, 1), quit: make(chan struct{}), ended: make(chan struct{}), batches: batches}
}

// idle tells the checkpointer that the writer has nothing queued after
// committing; it never blocks.
func (k *checkpointer) idle() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *checkpointer) run() {
	defer close(k.ended)
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-k.wake:
		case <-k.quit:
			return
		}
		// Wait until the writer has committed nothing for a while; a
		// commit meanwhile waits for the next idle moment.
		for {
			seen := k.batches.Load()
			t.Reset(k.after)
			select {
			case <-t.C:
			case <-k.quit:
				t.Stop()
				return
			}
			if k.batches.Load() == seen {
				break
			}
		}
		// A failure (the database busy in another process) leaves the
		// WAL to the writer's own checkpoints.
		var busy, frames, copied int64
		if err := k.c.queryRowOnce("PRAGMA wal_checkpoint(PASSIVE)", &busy, &frames, &copied); err == nil {
			k.frames.Store(frames)
			k.copied.Store(copied)
			k.runs.Add(1)
		}
	}
}

func (k *checkpointer) stop() {
	close(k.quit)
	<-k.ended
	k.c.close()
}
