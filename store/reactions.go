package store

import "context"

// Durable reactions (§6.9): work a commit plans inside its push
// transaction (sync_reactions, persisted atomically with the commit) and
// that runners deliver afterwards, at least once, under leases: a claim
// moves due rows to leased with an owner token and an expiry, and every
// later transition (extension, completion, failure, release) compares the
// owner, so a runner whose lease another took over can change nothing.

// ReactionState is the state of a stored reaction, as sync_reactions.status
// spells it.
type ReactionState string

// The states of a reaction: pending (due at AvailableAtMs), leased (a
// runner holds it until LeaseExpiresAtMs), completed, dead-letter (it
// failed permanently or ran out of attempts; kept until an operator
// retries or drops it, or retention prunes it).
const (
	ReactionPending   ReactionState = "pending"
	ReactionLeased    ReactionState = "leased"
	ReactionCompleted ReactionState = "completed"
	ReactionDead      ReactionState = "dead-letter"
)

// NewReaction is a reaction a commit planned, as its push transaction
// stores it (pending, due at CreatedAtMs, no attempt yet).
type NewReaction struct {
	// IdempotencyKey is unique within the partition: the JSON array
	// [partition, clientId, clientCommitId, plannerKey].
	IdempotencyKey string
	Type           string
	Version        int32
	// Payload is normalized JSON text.
	Payload              []byte
	SourceClientID       string
	SourceClientCommitID string
	SourceCommitSeq      int64
	CreatedAtMs          int64
	MaxAttempts          int
}

// ReactionTx is implemented by the write transactions of stores that keep
// reactions (both drivers): EnqueueReactions stores them in the
// transaction's partition, so that they commit or roll back with it.
type ReactionTx interface {
	EnqueueReactions(ctx context.Context, rs []NewReaction) error
}

// Reaction is a stored reaction.
type Reaction struct {
	Partition            string
	IdempotencyKey       string
	Type                 string
	Version              int32
	Payload              []byte
	SourceClientID       string
	SourceClientCommitID string
	SourceCommitSeq      int64
	CreatedAtMs          int64
	// AvailableAtMs is when a pending reaction is due; for a dead letter,
	// when it failed.
	AvailableAtMs int64
	State         ReactionState
	// Attempts counts the claims (each claim is an attempt, whether or not
	// its handler ever reported).
	Attempts    int
	MaxAttempts int
	// LeaseOwner and LeaseExpiresAtMs are set while leased.
	LeaseOwner       string
	LeaseExpiresAtMs int64
	CompletedAtMs    int64
	// LastFailure is the JSON object {"code","atMs","details"?} of the
	// last failure, or nil.
	LastFailure []byte
}

// ReactionClaim asks for due reactions.
type ReactionClaim struct {
	// Owner is the lease-owner token the claimed rows take.
	Owner string
	// Types are the handler names the runner has; only they are claimed.
	Types []string
	// NowMs is the claimer's clock; LeaseUntilMs the expiry the claimed
	// rows get.
	NowMs        int64
	LeaseUntilMs int64
	// Limit bounds the rows claimed.
	Limit int
}

// ReactionFailure is the outcome of a failed attempt.
type ReactionFailure struct {
	// Code is a stable, code-like failure code; AtMs the failure time.
	Code string
	AtMs int64
	// Details is a bounded JSON object, or nil.
	Details []byte
	// RetryAtMs is when the reaction is due again; 0 dead-letters it.
	RetryAtMs int64
}

// ReactionBacklog counts the reactions not completed, in every partition,
// at NowMs.
type ReactionBacklog struct {
	// Pending are the reactions waiting for a runner: pending ones (due
	// or waiting out a retry's backoff) and leased ones whose lease
	// expired (their runner is gone).
	Pending int64
	// Running are the leased reactions whose lease is valid.
	Running int64
	// Dead are the dead letters.
	Dead int64
	// OldestPendingCreatedAtMs is the creation time (the source commit's)
	// of the oldest pending reaction; 0 when none is pending.
	OldestPendingCreatedAtMs int64
}

// ReactionQuery selects stored reactions, ordered by (partition,
// idempotency key).
type ReactionQuery struct {
	// Partition, when set, selects one partition.
	Partition string
	// State, when set, selects one state.
	State ReactionState
	// AfterPartition and AfterKey resume after a reaction (keyset paging):
	// set both from the last reaction of the previous page.
	AfterPartition, AfterKey string
	// Limit bounds the page (1-1000; 0 means 100).
	Limit int
}

// ReactionRename reports what RenameReactions moved and left.
type ReactionRename struct {
	// Pending and Dead are the pending reactions and dead letters now
	// under the new name.
	Pending, Dead int64
	// Leased are the reactions of the old name left under it because a
	// runner holds them: a process still running the old handler
	// delivers them, or, when its lease expires, the next claim of any
	// runner makes them pending again (under the old name).
	Leased int64
}

// ReactionRenamer is implemented by the stores that keep reactions
// (both drivers): an operator who renames a handler moves its
// undelivered reactions to the new name, since a runner claims only the
// names it has handlers for. The stored payload, idempotency key,
// attempts and due time stay as they are.
type ReactionRenamer interface {
	// RenameReactions gives the pending reactions and dead letters named
	// from the name to, in one transaction, and counts the leased ones
	// it left.
	RenameReactions(ctx context.Context, from, to string) (ReactionRename, error)
}

// ReactionStore is implemented by stores that keep reactions (both
// drivers), in sync_reactions. A claim and every transition after it are
// atomic; a transition that names an owner applies only while that owner
// holds the lease (status leased, same owner), and reports whether it
// applied.
type ReactionStore interface {
	// ClaimReactions first settles expired leases (back to pending,
	// immediately due; to dead-letter, with the code
	// reaction.lease_expired, when the attempt was the last), then leases
	// up to Limit due pending reactions of the claim's types to its owner,
	// oldest due first, counting an attempt each, and returns them.
	// Concurrent claims get disjoint rows.
	ClaimReactions(ctx context.Context, c ReactionClaim) ([]Reaction, error)
	// ExtendReactionLease moves the lease's expiry to untilMs.
	ExtendReactionLease(ctx context.Context, partition, key, owner string, untilMs int64) (bool, error)
	// CompleteReaction marks the reaction completed at atMs.
	CompleteReaction(ctx context.Context, partition, key, owner string, atMs int64) (bool, error)
	// FailReaction records a failed attempt: pending again at f.RetryAtMs,
	// or dead-letter when f.RetryAtMs is 0.
	FailReaction(ctx context.Context, partition, key, owner string, f ReactionFailure) (bool, error)
	// ReleaseReaction gives a lease back without an outcome (its runner
	// stops): pending again, due at nowMs, the attempt not counted.
	ReleaseReaction(ctx context.Context, partition, key, owner string, nowMs int64) (bool, error)
	// ReleaseClaim gives back, as ReleaseReaction does, every lease that
	// a claim of owner took until leaseUntilMs, and returns how many. A
	// runner calls it when ClaimReactions failed: the store may have
	// applied the claim and lost only its answer (a timeout after the
	// commit), and its reactions would wait out the lease and lose an
	// attempt (the last one dead-letters undelivered).
	ReleaseClaim(ctx context.Context, owner string, leaseUntilMs, nowMs int64) (int64, error)
	// ReactionBacklog counts the reactions not completed.
	ReactionBacklog(ctx context.Context, nowMs int64) (ReactionBacklog, error)
	// ListReactions reads stored reactions.
	ListReactions(ctx context.Context, q ReactionQuery) ([]Reaction, error)
	// RetryReaction makes a dead letter pending again, due at nowMs, with
	// no attempt and no failure recorded; false when it is not a dead
	// letter.
	RetryReaction(ctx context.Context, partition, key string, nowMs int64) (bool, error)
	// DropReaction deletes a dead letter; false when it is not one.
	DropReaction(ctx context.Context, partition, key string) (bool, error)
	// PruneReactions deletes up to limit terminal reactions: completed
	// ones completed before completedBeforeMs and dead letters that
	// failed before deadBeforeMs. Pending and leased ones are never
	// deleted.
	PruneReactions(ctx context.Context, completedBeforeMs, deadBeforeMs int64, limit int) (completed, dead int, err error)
}

// MaxReactionPage is the largest page ListReactions returns.
const MaxReactionPage = 1000

// ReactionPage is the page size of q: its Limit, or 100, at most
// MaxReactionPage.
func ReactionPage(q ReactionQuery) int {
	switch {
	case q.Limit <= 0:
		return 100
	case q.Limit > MaxReactionPage:
		return MaxReactionPage
	}
	return q.Limit
}

// ReactionExpiredFailure is the failure JSON a claim records on a
// reaction whose lease expired on its last attempt.
func ReactionExpiredFailure(atMs int64) []byte {
	return EncodeReactionFailure(ReactionFailure{Code: "reaction.lease_expired", AtMs: atMs})
}

// EncodeReactionFailure is the stored JSON object of a failure
// (sync_reactions.last_failure): {"code","atMs"} and "details" when set.
func EncodeReactionFailure(f ReactionFailure) []byte {
	b := []byte(`{"code":`)
	b = appendJSString(b, f.Code)
	b = append(b, `,"atMs":`...)
	b = appendInt(b, f.AtMs)
	if len(f.Details) > 0 {
		b = append(b, `,"details":`...)
		b = append(b, f.Details...)
	}
	return append(b, '}')
}

func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		b = append(b, '-')
		v = -v
	}
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}

// appendJSString appends s as a JSON string the way JavaScript's
// JSON.stringify writes it (the reference computes keys so): quotes,
// backslashes and control characters escaped, nothing else.
func appendJSString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ReactionIdempotencyKey is the stored idempotency key of a planned
// reaction (§6.9): the JSON array [partition, clientId, clientCommitId,
// plannerKey] as JSON.stringify writes it. The strings must be UTF-8.
func ReactionIdempotencyKey(partition, clientID, clientCommitID, plannerKey string) string {
	b := make([]byte, 0, len(partition)+len(clientID)+len(clientCommitID)+len(plannerKey)+16)
	b = append(b, '[')
	for i, s := range [...]string{partition, clientID, clientCommitID, plannerKey} {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSString(b, s)
	}
	return string(append(b, ']'))
}
