package syncgo

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/syncgo/syncgo/store"
)

// ReactionsHandler serves the reactions' state for operators (§6.9, the
// reference's GET /admin/reactions), read-only, as JSON:
//
//	GET …?partition=P&state=dead-letter&limit=100[&after_partition=…&after_key=…][&payload=true]
//
// answers {"backlog": {...}, "reactions": [...], "next": {...} or null}:
// the backlog of every partition, one page of reactions (keyset paging:
// pass next's fields back as after_partition and after_key), each with
// its state, attempts, times, last failure and, with payload=true, its
// payload. It has no authentication of its own: mount it where only
// operators reach it (`syncgo serve` serves it at /admin/reactions on the
// admin listener). A store without reactions answers 404.
func (s *Server) ReactionsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			adminError(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		q := r.URL.Query()
		rq := store.ReactionQuery{Partition: q.Get("partition"), AfterPartition: q.Get("after_partition"), AfterKey: q.Get("after_key")}
		switch st := store.ReactionState(q.Get("state")); st {
		case "", "all":
		case store.ReactionPending, store.ReactionLeased, store.ReactionCompleted, store.ReactionDead:
			rq.State = st
		default:
			adminError(w, http.StatusBadRequest, "state must be pending, leased, completed, dead-letter or all")
			return
		}
		if (rq.AfterPartition == "") != (rq.AfterKey == "") {
			adminError(w, http.StatusBadRequest, "after_partition and after_key go together")
			return
		}
		rq.Limit = 100
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > 1000 {
				adminError(w, http.StatusBadRequest, "limit must be 1 to 1000")
				return
			}
			rq.Limit = n
		}
		withPayload := q.Get("payload") == "true"
		backlog, err := s.ReactionBacklog(r.Context())
		if errors.Is(err, ErrNoReactions) {
			adminError(w, http.StatusNotFound, "the store keeps no reactions")
			return
		}
		if err != nil {
			s.cfg.Logger.WarnContext(r.Context(), "reactions: backlog read failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the reactions could not be read")
			return
		}
		list, err := s.ListReactions(r.Context(), rq)
		if err != nil {
			s.cfg.Logger.WarnContext(r.Context(), "reactions: list failed", "err", err)
			adminError(w, http.StatusServiceUnavailable, "the reactions could not be read")
			return
		}
		out := adminReactions{Backlog: adminBacklog{Pending: backlog.Pending, Running: backlog.Running, Dead: backlog.Dead,
			OldestPendingSeconds: backlog.OldestPending.Seconds()}, Reactions: make([]adminReaction, len(list))}
		for i, rc := range list {
			out.Reactions[i] = adminReactionOf(rc, withPayload)
		}
		if len(list) == rq.Limit {
			last := list[len(list)-1]
			out.Next = &adminCursor{Partition: last.Partition, IdempotencyKey: last.IdempotencyKey}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(out)
	})
}

type adminReactions struct {
	Backlog   adminBacklog    `json:"backlog"`
	Reactions []adminReaction `json:"reactions"`
	Next      *adminCursor    `json:"next"`
}

type adminBacklog struct {
	Pending              int64   `json:"pending"`
	Running              int64   `json:"running"`
	Dead                 int64   `json:"dead"`
	OldestPendingSeconds float64 `json:"oldestPendingSeconds"`
}

type adminCursor struct {
	Partition      string `json:"partition"`
	IdempotencyKey string `json:"idempotencyKey"`
}

type adminReaction struct {
	Partition            string          `json:"partition"`
	IdempotencyKey       string          `json:"idempotencyKey"`
	Name                 string          `json:"name"`
	Version              int32           `json:"version"`
	State                string          `json:"state"`
	Attempts             int             `json:"attempts"`
	MaxAttempts          int             `json:"maxAttempts"`
	SourceClientID       string          `json:"sourceClientId"`
	SourceClientCommitID string          `json:"sourceClientCommitId"`
	SourceCommitSeq      int64           `json:"sourceCommitSeq"`
	CreatedAt            string          `json:"createdAt"`
	AvailableAt          string          `json:"availableAt,omitempty"`
	CompletedAt          string          `json:"completedAt,omitempty"`
	LeaseOwner           string          `json:"leaseOwner,omitempty"`
	LeaseExpiresAt       string          `json:"leaseExpiresAt,omitempty"`
	LastFailure          json.RawMessage `json:"lastFailure,omitempty"`
	Payload              json.RawMessage `json:"payload,omitempty"`
}

func adminReactionOf(r store.Reaction, withPayload bool) adminReaction {
	at := func(ms int64) string {
		if ms <= 0 {
			return ""
		}
		return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	out := adminReaction{Partition: r.Partition, IdempotencyKey: r.IdempotencyKey, Name: r.Type, Version: r.Version,
		State: string(r.State), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, SourceClientID: r.SourceClientID,
		SourceClientCommitID: r.SourceClientCommitID, SourceCommitSeq: r.SourceCommitSeq, CreatedAt: at(r.CreatedAtMs),
		AvailableAt: at(r.AvailableAtMs), CompletedAt: at(r.CompletedAtMs), LeaseOwner: r.LeaseOwner, LeaseExpiresAt: at(r.LeaseExpiresAtMs)}
	if json.Valid(r.LastFailure) {
		out.LastFailure = r.LastFailure
	}
	if withPayload && json.Valid(r.Payload) {
		out.Payload = r.Payload
	}
	return out
}

// adminError answers an operator route's refusal as {"error": message}.
func adminError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": message})
}
