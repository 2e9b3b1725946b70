package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/store"
)

// TouchPartition upserts the registry entry (its epoch only when new) and
// returns the partition's state, in one statement.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	return retryWrite(s, ctx, "TouchPartition", func() (store.Partition, error) { return s.touchPartitionOnce(ctx, partition, nowMs, newEpoch) })
}

// touchPartitionOnce is TouchPartition, once (see "Lost connections", retry.go).
func (s *Store) touchPartitionOnce(ctx context.Context, partition string, nowMs int64, newEpoch string) (store.Partition, error) {
	if err := s.checkWrite(); err != nil {
		return store.Partition{}, err
	}
	p := store.Partition{ID: partition}
	err := s.pool.QueryRow(ctx, sqlTouchPartition, partition, newEpoch, nowMs).
		Scan(&p.LogEpoch, &p.EpochRequired, &p.LastAuthenticatedAtMs, &p.MaxCommitSeq, &p.HorizonSeq)
	if err != nil {
		return store.Partition{}, fmt.Errorf("touch partition: %w", storageFull(err))
	}
	return p, nil
}

// Partition returns the partition's state. A partition is known when it
// has a registry entry or a commit-log counter row.
func (s *Store) Partition(ctx context.Context, partition string) (store.Partition, error) {
	return retry(s, ctx, "Partition", func() (store.Partition, error) { return s.partitionOnce(ctx, partition) })
}

// partitionOnce is Partition, once (see "Lost connections", retry.go).
func (s *Store) partitionOnce(ctx context.Context, partition string) (store.Partition, error) {
	if err := s.check(); err != nil {
		return store.Partition{}, err
	}
	return scanPartitionRow(s.pool.QueryRow(ctx, sqlPartition, partition), partition)
}

// CommitHeads returns the newest commit sequence of each of the
// partitions that has a commit-log counter row, in one statement.
func (s *Store) CommitHeads(ctx context.Context, partitions []string) (map[string]int64, error) {
	return retry(s, ctx, "CommitHeads", func() (map[string]int64, error) { return s.commitHeadsOnce(ctx, partitions) })
}

// commitHeadsOnce is CommitHeads, once (see "Lost connections", retry.go).
func (s *Store) commitHeadsOnce(ctx context.Context, partitions []string) (map[string]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sqlCommitHeads, partitions)
	if err != nil {
		return nil, fmt.Errorf("commit heads: %w", err)
	}
	out := make(map[string]int64, len(partitions))
	var id string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
		out[id] = seq
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit heads: %w", err)
	}
	return out, nil
}

// scanPartitionRow reads a partition's state from a sqlPartition row;
// ErrNotFound when the partition is unknown.
func scanPartitionRow(row pgx.Row, partition string) (store.Partition, error) {
	p := store.Partition{ID: partition}
	var registered, counted bool
	err := row.Scan(&registered, &p.LogEpoch, &p.EpochRequired,
		&p.LastAuthenticatedAtMs, &counted, &p.MaxCommitSeq, &p.HorizonSeq)
	if err != nil {
		return store.Partition{}, fmt.Errorf("partition: %w", err)
	}
	if !registered && !counted {
		return store.Partition{}, store.ErrNotFound
	}
	return p, nil
}

// RotateLogEpoch sets the new epoch, requires epochs and deletes the
// partition's client records: two statements in one pipelined batch,
// which Postgres runs as one implicit transaction.
func (s *Store) RotateLogEpoch(ctx context.Context, partition, newEpoch string, nowMs int64) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if newEpoch == "" {
		return errors.New("rotate log epoch: the new epoch is empty")
	}
	return s.syncClient(partition, "", func() error {
		b := &pgx.Batch{}
		b.Queue(sqlRotateEpoch, partition, newEpoch, nowMs)
		b.Queue(sqlDeleteClients, partition)
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("rotate log epoch: %w", err)
		}
		return nil
	})
}

// RotateLogEpochs rotates several partitions as RotateLogEpoch does, each
// to its epoch in epochs (partition to new epoch): two statements over
// arrays in one pipelined batch, one implicit transaction, so that an
// interrupted call (a killed process, a lost connection) rotates none of
// them.
func (s *Store) RotateLogEpochs(ctx context.Context, epochs map[string]string, nowMs int64) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	parts := slices.Sorted(maps.Keys(epochs))
	news := make([]string, len(parts))
	for i, p := range parts {
		if news[i] = epochs[p]; news[i] == "" {
			return fmt.Errorf("rotate log epochs: partition %q: the new epoch is empty", p)
		}
	}
	write := func() error {
		b := &pgx.Batch{}
		b.Queue(sqlRotateEpochs, parts, news, nowMs)
		b.Queue(sqlDeleteClientsOf, parts)
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("rotate log epochs: %w", storageFull(err))
		}
		return nil
	}
	if s.clients == nil {
		return write()
	}
	return s.clients.SyncPartitions(parts, write)
}

// CommitSeqBefore returns the newest commit sequence created before
// beforeMs, or 0.
func (s *Store) CommitSeqBefore(ctx context.Context, partition string, beforeMs int64) (int64, error) {
	return retry(s, ctx, "CommitSeqBefore", func() (int64, error) { return s.commitSeqBeforeOnce(ctx, partition, beforeMs) })
}

// commitSeqBeforeOnce is CommitSeqBefore, once (see "Lost connections", retry.go).
func (s *Store) commitSeqBeforeOnce(ctx context.Context, partition string, beforeMs int64) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var seq int64
	if err := s.pool.QueryRow(ctx, sqlCommitSeqBefore, partition, beforeMs).Scan(&seq); err != nil {
		return 0, fmt.Errorf("commit seq before: %w", err)
	}
	return seq, nil
}

// PruneThrough deletes the log through throughSeq in one transaction under
// the partition's row lock, in two round trips: (BEGIN, lock, epoch) and
// (deletes, horizon, COMMIT).
func (s *Store) PruneThrough(ctx context.Context, partition, logEpoch string, throughSeq int64) (res store.PruneResult, err error) {
	if err := s.checkWrite(); err != nil {
		return store.PruneResult{}, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune: acquire connection: %w", err)
	}
	defer conn.Release()
	tx := newBatch(s, conn, ctx, partition, false)
	defer tx.rollback()
	br, err := tx.send(ctx, nil, func(b *pgx.Batch) {
		b.Queue(sqlLockPartition, partition)
		b.Queue(sqlRegistryEpochShared, partition)
	})
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	var maxSeq, horizon int64
	var epoch string
	err = br.QueryRow().Scan(&maxSeq, &horizon)
	if err == nil {
		if err = br.QueryRow().Scan(&epoch); errors.Is(err, pgx.ErrNoRows) {
			err = nil // no registry entry: the epoch is ""
		}
	}
	if err = closeBatch(br, err); err != nil {
		return store.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	if epoch != logEpoch {
		return store.PruneResult{}, &store.Error{
			Code:    store.CodePruneEpochMismatch,
			Message: "the prune's log epoch is not the partition's",
			Err:     store.ErrEpochMismatch,
		}
	}
	target := min(throughSeq, maxSeq)
	if target <= horizon {
		return store.PruneResult{HorizonSeq: horizon}, nil
	}
	br, err = tx.send(ctx, nil, func(b *pgx.Batch) {
		b.Queue(sqlPruneCommits, partition, target)
		b.Queue(sqlPruneChanges, partition, target)
		b.Queue(sqlPruneChangeScopes, partition, target)
		b.Queue(sqlPruneTombstones, partition, target)
		b.Queue(sqlSetHorizon, partition, target)
		b.Queue("COMMIT")
	})
	if err != nil {
		return store.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	tag, err := br.Exec()
	res.CommitsDeleted = tag.RowsAffected()
	for range 3 {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		err = br.QueryRow().Scan(&res.HorizonSeq)
	}
	if err == nil {
		if tag, err = br.Exec(); err == nil && tag.String() != "COMMIT" {
			err = errors.New("the transaction was rolled back")
		}
	}
	if err = closeBatch(br, err); err != nil {
		return store.PruneResult{}, fmt.Errorf("prune: %w", err)
	}
	tx.done = true
	return res, nil
}
