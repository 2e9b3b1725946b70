package syncgo

import (
	"errors"
	"net/http"

	"github.com/syncgo/syncgo/internal/remotewire"
	"github.com/syncgo/syncgo/syncerr"
)

// OperationsContentType is the content type of remote operation requests
// and responses (REMOTE.md §5).
const OperationsContentType = remotewire.ContentType

// handleOperation serves POST /operations (REMOTE.md §5): one encoded
// request, one encoded response. Authentication failures and a wrong
// content type are HTTP errors in the §10.1 JSON shape; everything after
// the body is read is an encoded response: a success, or kind "error"
// with a §7 code (HTTP 200, except 413 for an oversized body).
func (s *Server) handleOperation(w http.ResponseWriter, r *http.Request) {
	const route = "operations"
	if !s.mediaTypeIs(w, r, route, OperationsContentType, codeOpInvalidRequest) {
		return
	}
	auth, aerr := s.authenticate(r)
	if aerr != nil {
		s.writeError(w, route, aerr)
		return
	}
	noteActor(w, auth.ActorID)
	body, releaseBody, err := s.readBody(w, r, s.ops.maxBytes)
	defer releaseBody()
	if errors.Is(err, errBodyMemory) {
		// As an admission refusal is answered (below).
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", s.admit.retryAfter())
		s.writeOperation(w, route, http.StatusOK, errorResponse(s.admit.overloaded()))
		return
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		status := http.StatusBadRequest
		var mbe *http.MaxBytesError
		if errors.Is(err, errBodyTooLarge) || errors.As(err, &mbe) {
			status = http.StatusRequestEntityTooLarge
		}
		s.writeOperation(w, route, status, errorResponse(opError(codeOpInvalidRequest, "the request body is too large or unreadable")))
		return
	}
	req, err := remotewire.DecodeRequest(body)
	if err != nil {
		s.writeOperation(w, route, http.StatusOK, errorResponse(opError(codeOpInvalidRequest, err.Error())))
		return
	}
	if pe, wait := s.rates.allow(auth.Partition, auth.ActorID); pe != nil {
		w.Header().Set("Retry-After", retryAfterSeconds(wait))
		s.writeOperation(w, route, http.StatusOK, errorResponse(pe))
		return
	}
	release, refusal := s.admit.acquire(r.Context())
	if refusal != nil {
		if pe := syncerr.As(refusal); pe != nil {
			w.Header().Set("Retry-After", s.admit.retryAfter())
			s.writeOperation(w, route, http.StatusOK, errorResponse(pe))
		}
		return
	}
	defer release()
	ctx := r.Context()
	c := Caller{ActorID: auth.ActorID, Partition: auth.Partition, ClientID: req.ClientID}
	var resp remotewire.Message
	err = s.checkCaller(ctx, c)
	if err == nil {
		switch req.Kind {
		case remotewire.KindQuery:
			cq := s.ops.queries[req.OperationID]
			if cq == nil {
				err = opError(codeOpUnknown, "no query is registered as "+req.OperationID)
				break
			}
			resp, err = s.runQuery(ctx, cq, c, req.Params)
		case remotewire.KindCommand:
			cmd := s.ops.commands[req.OperationID]
			if cmd == nil {
				err = opError(codeOpUnknown, "no command is registered as "+req.OperationID)
				break
			}
			resp, err = s.runCommand(ctx, cmd, c, req.RequestID, req.Params)
		}
	}
	if err != nil {
		pe := operationError(err, codeOpExecutionFailed)
		s.reportOperationFailure(route, pe)
		resp = errorResponse(pe)
	}
	s.writeOperation(w, route, http.StatusOK, resp)
}

// reportOperationFailure logs an operation that failed in the server
// (not the caller's fault) and reports it to OnError (reportFailure: a
// caller that went away is a warning).
func (s *Server) reportOperationFailure(route string, pe *syncerr.Error) {
	switch pe.Code {
	case codeOpExecutionFailed, codeOpQueryFailed, syncerr.CodeInternalError:
		s.reportFailure(route, "operation failed", pe)
	}
}

// writeOperation writes an encoded response.
func (s *Server) writeOperation(w http.ResponseWriter, route string, status int, m remotewire.Message) {
	b, err := remotewire.Marshal(m)
	if err != nil {
		s.writeError(w, route, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", OperationsContentType)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
