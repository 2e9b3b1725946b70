package sqlitestore

import (
	"slices"

	"github.com/syncgo/syncgo/store"
)

// batchCache is what the writer remembers within one batch transaction
// so that a pushed commit runs fewer statements: each partition's commit
// sequence and the serve gates read. The batch holds the database's
// write lock from BEGIN IMMEDIATE to COMMIT, so no other connection can
// change either meanwhile; only the batch's own statements can, and
// those fall into two kinds. The statements of a push (writeTx's row,
// log and journal methods, the savepoints) run "hot" (conn.hot): they
// touch neither sync_partitions beyond the sequence nor any table the
// gate reads. Any other statement on the writer's connection (a
// barrier step, a touch, a prune, a read of the partition's state)
// first writes the pending sequences to sync_partitions and forgets
// them and the gates (conn.other), so it sees and changes the tables as
// if nothing were cached, and what it changed is read again after it.
//
// A partition's first commit in a batch still increments
// sync_partitions.max_commit_seq in the row itself (and reads it back);
// the next ones take the following numbers from here, and the row gets
// the batch's last number once, before COMMIT: one statement per batch
// and partition instead of one per commit. Savepoints are followed: a
// ROLLBACK TO restores the sequences as they were at that savepoint,
// as the database restores the row.
type batchCache struct {
	seqs []partSeq
	// saved holds, for each open savepoint (innermost last), the seqs
	// at its start: marks[i] is where savepoint i's copy begins.
	saved []partSeq
	marks []int
	gates []cachedGate
}

// partSeq is a partition's last commit sequence as the batch assigned it
// (seq) and as its sync_partitions row holds it now (stored).
type partSeq struct {
	partition   string
	seq, stored int64
}

type cachedGate struct {
	partition string
	running   int32
	gate      store.ServeGate
}

// reset forgets everything: at a batch's start and end.
func (b *batchCache) reset() {
	b.forgetSeqs()
	b.forgetGates()
	clear(b.saved)
	b.saved, b.marks = b.saved[:0], b.marks[:0]
}

// savepoint records the sequences at a SAVEPOINT.
func (b *batchCache) savepoint() {
	b.marks = append(b.marks, len(b.saved))
	b.saved = append(b.saved, b.seqs...)
}

// rollbackTo restores the sequences of the innermost savepoint (which a
// ROLLBACK TO keeps open) and forgets the gates: a gate read after a
// change that was rolled back would be stale.
func (b *batchCache) rollbackTo() {
	if len(b.marks) == 0 {
		b.reset()
		return
	}
	b.seqs = append(b.seqs[:0], b.saved[b.marks[len(b.marks)-1]:]...)
	b.forgetGates()
}

// release closes the innermost savepoint (RELEASE).
func (b *batchCache) release() {
	if len(b.marks) == 0 {
		return
	}
	top := b.marks[len(b.marks)-1]
	clear(b.saved[top:])
	b.saved, b.marks = b.saved[:top], b.marks[:len(b.marks)-1]
}

// next returns the partition's next commit sequence when the batch
// already assigned one, and records it as assigned.
func (b *batchCache) next(partition string) (int64, bool) {
	for i := range b.seqs {
		if b.seqs[i].partition == partition {
			b.seqs[i].seq++
			return b.seqs[i].seq, true
		}
	}
	return 0, false
}

// stored records a sequence that the partition's row holds now.
func (b *batchCache) stored(partition string, seq int64) {
	b.seqs = append(b.seqs, partSeq{partition: partition, seq: seq, stored: seq})
}

// forgetSeqs drops the sequences (written first: flush); a savepoint
// taken before keeps its copy.
func (b *batchCache) forgetSeqs() {
	clear(b.seqs)
	b.seqs = b.seqs[:0]
}

// flush writes the sequences not yet in their rows, as hot statements.
func (b *batchCache) flush(c *conn) error {
	defer c.enterHot().exitHot()
	for i := range b.seqs {
		s := &b.seqs[i]
		if s.seq == s.stored {
			continue
		}
		if err := c.exec("UPDATE sync_partitions SET max_commit_seq=? WHERE partition=?", s.seq, s.partition); err != nil {
			return err
		}
		s.stored = s.seq
	}
	return nil
}

// gate returns the serve gate read earlier in the batch.
func (b *batchCache) gate(partition string, running int32) (store.ServeGate, bool) {
	for _, g := range b.gates {
		if g.partition == partition && g.running == running {
			out := g.gate
			out.Pending = slices.Clone(g.gate.Pending)
			return out, true
		}
	}
	return store.ServeGate{}, false
}

func (b *batchCache) keepGate(partition string, running int32, g store.ServeGate) {
	g.Pending = slices.Clone(g.Pending)
	b.gates = append(b.gates, cachedGate{partition: partition, running: running, gate: g})
}

// forgetGates drops the gates (conn.other).
func (b *batchCache) forgetGates() {
	clear(b.gates)
	b.gates = b.gates[:0]
}
