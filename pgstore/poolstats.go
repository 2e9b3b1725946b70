package pgstore

import "github.com/syncgo/syncgo/store"

var _ store.PoolReporter = (*Store)(nil)

// PoolStats returns a snapshot of the connection pool (pgxpool.Stat).
func (s *Store) PoolStats() store.PoolStats {
	st := s.pool.Stat()
	return store.PoolStats{
		MaxConns:             st.MaxConns(),
		TotalConns:           st.TotalConns(),
		AcquiredConns:        st.AcquiredConns(),
		IdleConns:            st.IdleConns(),
		ConstructingConns:    st.ConstructingConns(),
		AcquireCount:         st.AcquireCount(),
		AcquireDuration:      st.AcquireDuration(),
		EmptyAcquireCount:    st.EmptyAcquireCount(),
		EmptyAcquireWait:     st.EmptyAcquireWaitTime(),
		CanceledAcquireCount: st.CanceledAcquireCount(),
		NewConns:             st.NewConnsCount(),
	}
}
