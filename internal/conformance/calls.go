package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/syncgo/syncgo/internal/engine"
	"github.com/syncgo/syncgo/store"
)

// callError is a control-call failure answered with its own HTTP status
// (other failures answer 500).
type callError struct {
	status int
	msg    string
}

func (e *callError) Error() string { return e.msg }

func badArgs(format string, a ...any) error {
	return &callError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

// callFunc is one control call: it reads its JSON args and returns a
// JSON-able result (nil answers null).
type callFunc func(ctx context.Context, in *instance, args []json.RawMessage) (any, error)

var calls = map[string]callFunc{
	"setAllowedScopes":          callSetAllowedScopes,
	"setResolverFailing":        callSetResolverFailing,
	"advanceClock":              callAdvanceClock,
	"nowMs":                     callNowMs,
	"prune":                     callPrune,
	"getMaxCommitSeq":           callGetMaxCommitSeq,
	"getHorizonSeq":             callGetHorizonSeq,
	"readRows":                  callReadRows,
	"captureBackup":             callCaptureBackup,
	"restoreBackup":             callRestoreBackup,
	"failNextIdempotencyLookup": callFailNextIdempotencyLookup,
	"installValidators":         callInstallValidators,
	"installCommitValidator":    callInstallCommitValidator,
	"setResolverOutage":         callSetResolverOutage,
	"revokeLease":               callRevokeLease,
	"setSignedUrlTtlSeconds":    callSetSignedURLTTL,
	"setBlobPresign":            callSetBlobPresign,
}

// unimplemented maps the control calls of capabilities this server does
// not advertise to their capability.
var unimplemented = map[string]string{
	"pruneDuringNextCommitRead":      "concurrent-storage-faults",
	"reverseNextCommitNotifications": "concurrent-storage-faults",
}

// call runs one control call.
func (in *instance) call(ctx context.Context, method string, args []json.RawMessage) (any, error) {
	if f, ok := calls[method]; ok {
		return f(ctx, in, args)
	}
	if capability, ok := unimplemented[method]; ok {
		return nil, &callError{status: http.StatusNotImplemented,
			msg: fmt.Sprintf("not implemented: the %q capability is not advertised", capability)}
	}
	return nil, &callError{status: http.StatusBadRequest, msg: "unknown method"}
}

// hasArg reports whether argument i is present and not null.
func hasArg(args []json.RawMessage, i int) bool {
	return i < len(args) && !bytes.Equal(bytes.TrimSpace(args[i]), []byte("null"))
}

// arg decodes the required argument i into v.
func arg(args []json.RawMessage, i int, name string, v any) error {
	if !hasArg(args, i) {
		return badArgs("argument %d (%s) is required", i+1, name)
	}
	if err := json.Unmarshal(args[i], v); err != nil {
		return badArgs("argument %d (%s): %v", i+1, name, err)
	}
	return nil
}

func callSetAllowedScopes(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var actor string
	var allowed map[string][]string
	if err := arg(args, 0, "actorId", &actor); err != nil {
		return nil, err
	}
	if err := arg(args, 1, "allowed scopes", &allowed); err != nil {
		return nil, err
	}
	in.setAllowed(actor, allowed)
	return nil, nil
}

func callSetResolverFailing(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var failing bool
	if err := arg(args, 0, "failing", &failing); err != nil {
		return nil, err
	}
	in.setResolverFailing(failing)
	return nil, nil
}

func callAdvanceClock(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var ms int64
	if err := arg(args, 0, "ms", &ms); err != nil {
		return nil, err
	}
	if ms < 0 {
		return nil, badArgs("the clock only moves forward (ms %d)", ms)
	}
	in.nowMs.Add(ms)
	return nil, nil
}

func callNowMs(_ context.Context, in *instance, _ []json.RawMessage) (any, error) {
	return in.nowMs.Load(), nil
}

func callCaptureBackup(ctx context.Context, in *instance, _ []json.RawMessage) (any, error) {
	return nil, in.captureBackup(ctx)
}

func callRestoreBackup(ctx context.Context, in *instance, _ []json.RawMessage) (any, error) {
	return nil, in.restoreBackup(ctx)
}

func callFailNextIdempotencyLookup(_ context.Context, in *instance, _ []json.RawMessage) (any, error) {
	in.store.failPushResult.Store(true)
	return nil, nil
}

// retentionArgs is the optional argument of prune; absent fields take the
// defaults of §4.6, as the reference harness does.
type retentionArgs struct {
	ActiveWindowMs     *int64 `json:"activeWindowMs"`
	AgeForceMs         *int64 `json:"ageForceMs"`
	MinRetainedCommits *int64 `json:"minRetainedCommits"`
}

func callPrune(ctx context.Context, in *instance, args []json.RawMessage) (any, error) {
	pol := engine.RetentionPolicy{ActiveWindow: 14 * 24 * time.Hour, AgeForce: 30 * 24 * time.Hour, MinRetainedCommits: 1000}
	if hasArg(args, 0) {
		var ra retentionArgs
		if err := arg(args, 0, "retention", &ra); err != nil {
			return nil, err
		}
		for name, v := range map[string]*int64{"activeWindowMs": ra.ActiveWindowMs, "ageForceMs": ra.AgeForceMs,
			"minRetainedCommits": ra.MinRetainedCommits} {
			if v != nil && *v < 0 {
				return nil, badArgs("%s must not be negative", name)
			}
		}
		if ra.ActiveWindowMs != nil {
			pol.ActiveWindow = time.Duration(*ra.ActiveWindowMs) * time.Millisecond
		}
		if ra.AgeForceMs != nil {
			pol.AgeForce = time.Duration(*ra.AgeForceMs) * time.Millisecond
		}
		if ra.MinRetainedCommits != nil {
			pol.MinRetainedCommits = *ra.MinRetainedCommits
		}
	}
	horizon, err := in.pruner.PruneUnchecked(ctx, in.partition, pol)
	if errors.Is(err, store.ErrNotFound) {
		return int64(0), nil // no request reached the partition yet: nothing to prune
	}
	return horizon, err
}

func callGetMaxCommitSeq(ctx context.Context, in *instance, _ []json.RawMessage) (any, error) {
	p, err := in.partitionState(ctx)
	return p.MaxCommitSeq, err
}

func callGetHorizonSeq(ctx context.Context, in *instance, _ []json.RawMessage) (any, error) {
	p, err := in.partitionState(ctx)
	return p.HorizonSeq, err
}

// partitionState reads the instance partition; before any request has
// registered it, its counters are zero.
func (in *instance) partitionState(ctx context.Context) (store.Partition, error) {
	p, err := in.store.Partition(ctx, in.partition)
	if errors.Is(err, store.ErrNotFound) {
		return store.Partition{ID: in.partition}, nil
	}
	return p, err
}

func callReadRows(ctx context.Context, in *instance, args []json.RawMessage) (any, error) {
	var table string
	if err := arg(args, 0, "table", &table); err != nil {
		return nil, err
	}
	return in.readRows(ctx, table)
}

func callSetResolverOutage(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var outage bool
	if err := arg(args, 0, "outage", &outage); err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.resolverOutage = outage
	in.mu.Unlock()
	return nil, nil
}

func callRevokeLease(ctx context.Context, in *instance, args []json.RawMessage) (any, error) {
	var id string
	if err := arg(args, 0, "leaseId", &id); err != nil {
		return nil, err
	}
	return nil, in.srv.RevokeLease(ctx, in.partition, id)
}

func callSetSignedURLTTL(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var secs int64
	if err := arg(args, 0, "ttlSeconds", &secs); err != nil {
		return nil, err
	}
	if secs < 0 {
		return nil, badArgs("ttlSeconds must not be negative, got %d", secs)
	}
	if !in.signedURLs {
		return nil, badArgs("the instance was created without signedUrls")
	}
	in.srv.SetSignedURLTTL(time.Duration(secs) * time.Second)
	return nil, nil
}

func callSetBlobPresign(_ context.Context, in *instance, args []json.RawMessage) (any, error) {
	var on bool
	if err := arg(args, 0, "enabled", &on); err != nil {
		return nil, err
	}
	in.srv.SetBlobPresign(on)
	return nil, nil
}
