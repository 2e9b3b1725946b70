package syncgo

import (
	"encoding/json"
	"net/http"

	"github.com/syncgo/syncgo/syncerr"
)

// writeError answers a request-level failure as the §10.1 JSON shape with
// the catalog's HTTP status. Non-catalog failures are reported to OnError
// and answered as sync.internal_error.
func (s *Server) writeError(w http.ResponseWriter, route string, err error) {
	pe := syncerr.As(err)
	if pe == nil {
		pe = syncerr.Internal(err)
	}
	if pe.Code == syncerr.CodeInternalError {
		s.cfg.Logger.Error("request failed", "route", route, "err", err)
		if s.cfg.OnError != nil {
			s.cfg.OnError(err, route)
		}
	}
	body, merr := json.Marshal(pe)
	if merr != nil {
		body = []byte(`{"code":"sync.internal_error","message":"internal server error","category":"internal","retryable":true,"recommendedAction":"retryLater"}`)
	}
	noteCode(w, pe.Code)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Encoding")
	w.WriteHeader(pe.Status())
	_, _ = w.Write(body)
}
