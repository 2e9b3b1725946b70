package syncgo

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/syncgo/syncgo/syncerr"
)

// writeError answers a request-level failure as the §10.1 JSON shape with
// the catalog's HTTP status. Non-catalog failures are reported to OnError
// and answered as sync.internal_error, unless the client went away.
func (s *Server) writeError(w http.ResponseWriter, route string, err error) {
	pe := syncerr.As(err)
	if pe == nil {
		pe = syncerr.Internal(err)
	}
	if pe.Code == syncerr.CodeInternalError {
		s.reportFailure(route, "request failed", err)
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

// reportFailure logs a failure of the server at ERROR and reports it to
// OnError, except a failure caused by the client (§10.2 keeps the answer
// sync.internal_error, which nobody reads): a warning, since operators
// page on errors and a lost or stalled connection is no server fault.
func (s *Server) reportFailure(route, msg string, err error) {
	if clientWentAway(err) {
		s.cfg.Logger.Warn(msg+": the client went away or stopped reading", "route", route, "err", err)
		return
	}
	s.cfg.Logger.Error(msg, "route", route, "err", err)
	if s.cfg.OnError != nil {
		s.cfg.OnError(err, route)
	}
}

// clientWentAway reports a failure caused by the client: the end of its
// request's context (net/http cancels it when the client's connection
// closes; the server cancels no request's context of its own, Stop lets
// requests finish), or a write of the response to its connection that
// failed (clientWriteError).
func clientWentAway(err error) bool {
	var cw clientWriteError
	return errors.Is(err, context.Canceled) || errors.As(err, &cw)
}
