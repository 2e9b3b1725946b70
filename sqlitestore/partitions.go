package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/syncgo/syncgo/store"
)

const selectPartition = `SELECT r.log_epoch, r.epoch_required, r.last_authenticated_at_ms,
  COALESCE(p.max_commit_seq, 0), COALESCE(p.horizon_seq, 0)
FROM sync_partition_registry r LEFT JOIN sync_partitions p ON p.partition = r.partition
WHERE r.partition = ?`

func scanPartition(row *row, id string) (store.Partition, error) {
	p := store.Partition{ID: id}
	err := row.Scan(&p.LogEpoch, &p.EpochRequired, &p.LastAuthenticatedAtMs, &p.MaxCommitSeq, &p.HorizonSeq)
	if errors.Is(err, errNoRows) {
		return store.Partition{}, store.ErrNotFound
	}
	if err != nil {
		return store.Partition{}, fmt.Errorf("read partition: %w", err)
	}
	return p, nil
}

// TouchPartition records an authenticated request and returns the
// partition's state, creating its registry entry with newEpoch.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	var p store.Partition
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		if err := c.exec(`INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
VALUES (?, ?, 0, ?) ON CONFLICT(partition) DO UPDATE SET last_authenticated_at_ms = excluded.last_authenticated_at_ms`,
			partition, newEpoch, nowMs); err != nil {
			return err
		}
		var err error
		p, err = scanPartition(c.queryRow(selectPartition, partition), partition)
		return err
	})
	if err != nil {
		return store.Partition{}, fmt.Errorf("touch partition: %w", err)
	}
	return p, nil
}

// Partition returns the partition's state.
func (s *Store) Partition(ctx context.Context, partition string) (store.Partition, error) {
	if s.closed.Load() {
		return store.Partition{}, store.ErrClosed
	}
	var p store.Partition
	err := s.read(ctx, func(c *conn) error {
		var err error
		p, err = scanPartition(c.queryRow(selectPartition, partition), partition)
		return err
	})
	return p, err
}

// RotateLogEpoch gives the partition a new log epoch, requires epochs from
// now on and forgets its client records.
func (s *Store) RotateLogEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	return s.syncClient(ctx, partition, "", func(ctx context.Context, c *conn) error {
		if err := c.exec(`INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
VALUES (?, ?, 1, ?) ON CONFLICT(partition) DO UPDATE SET log_epoch = excluded.log_epoch, epoch_required = 1`,
			partition, newEpoch, nowMs); err != nil {
			return fmt.Errorf("rotate log epoch: %w", err)
		}
		if err := c.exec("DELETE FROM sync_clients WHERE partition=?", partition); err != nil {
			return fmt.Errorf("rotate log epoch: %w", err)
		}
		return nil
	})
}

// RotateLogEpochs rotates several partitions as RotateLogEpoch does, each
// to its epoch in epochs (partition to new epoch), in one transaction: an
// interrupted call (a killed process, a full disk) rotates none of them.
func (s *Store) RotateLogEpochs(ctx context.Context, epochs map[string]string, nowMs int64) error {
	parts := slices.Sorted(maps.Keys(epochs))
	for _, p := range parts {
		if epochs[p] == "" {
			return fmt.Errorf("rotate log epochs: partition %q: the new epoch is empty", p)
		}
	}
	write := func() error {
		return s.w.do(ctx, func(ctx context.Context, c *conn) error {
			for _, p := range parts {
				if err := c.exec(`INSERT INTO sync_partition_registry(partition, log_epoch, epoch_required, last_authenticated_at_ms)
VALUES (?, ?, 1, ?) ON CONFLICT(partition) DO UPDATE SET log_epoch = excluded.log_epoch, epoch_required = 1`,
					p, epochs[p], nowMs); err != nil {
					return fmt.Errorf("rotate log epochs: partition %q: %w", p, err)
				}
				if err := c.exec("DELETE FROM sync_clients WHERE partition=?", p); err != nil {
					return fmt.Errorf("rotate log epochs: partition %q: %w", p, err)
				}
			}
			return nil
		})
	}
	if s.clients == nil {
		return write()
	}
	return s.clients.SyncPartitions(parts, write)
}

// CommitSeqBefore returns the newest commit sequence created before
// beforeMs, or 0.
func (s *Store) CommitSeqBefore(ctx context.Context, partition string, beforeMs int64) (int64, error) {
	if s.closed.Load() {
		return 0, store.ErrClosed
	}
	var seq nullInt64
	err := s.read(ctx, func(c *conn) error {
		return c.queryRow(`SELECT MAX(commit_seq) FROM sync_commits WHERE partition=? AND created_at_ms < ?`,
			partition, beforeMs).Scan(&seq)
	})
	if err != nil {
		return 0, fmt.Errorf("commit seq before: %w", err)
	}
	return seq.Int64, nil
}

// PruneThrough deletes the log through throughSeq and raises the horizon.
func (s *Store) PruneThrough(ctx context.Context, partition, logEpoch string, throughSeq int64) (store.PruneResult, error) {
	var res store.PruneResult
	err := s.w.do(ctx, func(ctx context.Context, c *conn) error {
		s.w.dropRecent = true // the log changes under the recent commits (recent.go)
		var epoch string
		err := c.queryRow("SELECT log_epoch FROM sync_partition_registry WHERE partition=?", partition).Scan(&epoch)
		if errors.Is(err, errNoRows) || (err == nil && epoch != logEpoch) {
			return store.ErrEpochMismatch
		}
		if err != nil {
			return err
		}
		var maxSeq, horizon int64
		err = c.queryRow("SELECT max_commit_seq, horizon_seq FROM sync_partitions WHERE partition=?", partition).Scan(&maxSeq, &horizon)
		if errors.Is(err, errNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		through := min(throughSeq, maxSeq)
		res.HorizonSeq = horizon
		if through <= horizon {
			return nil
		}
		n, err := c.execChanges("DELETE FROM sync_commits WHERE partition=? AND commit_seq > ? AND commit_seq <= ?", partition, horizon, through)
		if err != nil {
			return err
		}
		res.CommitsDeleted = n
		for _, q := range []string{
			"DELETE FROM sync_changes WHERE partition=? AND commit_seq > ? AND commit_seq <= ?",
			"DELETE FROM sync_change_scopes WHERE partition=? AND commit_seq > ? AND commit_seq <= ?",
		} {
			if err := c.exec(q, partition, horizon, through); err != nil {
				return err
			}
		}
		if err := c.exec("DELETE FROM sync_tombstones WHERE partition=? AND commit_seq <= ?", partition, through); err != nil {
			return err
		}
		res.HorizonSeq = through
		return c.exec("UPDATE sync_partitions SET horizon_seq=? WHERE partition=?", through, partition)
	})
	if err != nil {
		if errors.Is(err, store.ErrEpochMismatch) {
			return store.PruneResult{}, err
		}
		return store.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}
