package pgstore

import (
	"context"

	"github.com/syncgo/syncgo/internal/shareread"
)

// Shared reads (entry_share.go, window_share.go): the reads of one key
// that arrive while a read of that key is in flight queue; when it ends,
// the next read answers every queued one (internal/shareread).

// sharedReadContext is the context of a shared read: the first asker's
// values without its cancellation (the read answers others too), ended
// when the store closes.
func (s *Store) sharedReadContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return shareread.DetachedContext(ctx, s.done)
}
