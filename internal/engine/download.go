package engine

import (
	"context"
	"errors"
	"sort"

	"github.com/syncgo/syncgo/store"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// Download re-authorizes a segment download (§5.5): the actor's scopes are
// resolved afresh, the effective scopes of the requested map are computed,
// and their digest must belong to a publication of the segment in the
// caller's partition and live log epoch.
//
// A segment this process published lately is authorized against the
// publications it remembers (hotSegments) without reading its bytes back;
// any other outcome is decided by the segment store's record.
//
// The body returned is the segment's bytes, or, from a store that keeps
// bodies, the stored body in the coding its Encoding names (ByteLength
// the length of the bytes).
func (e *Engine) Download(ctx context.Context, auth Auth, segmentID string, requested map[string][]string) (Body, error) {
	if seg, ok := e.hot.get(segmentID); ok {
		if err := e.authorizeDownload(ctx, auth, seg, requested); err == nil {
			return bodyOf(seg), nil
		}
	}
	seg, err := e.storedSegment(ctx, segmentID)
	if errors.Is(err, store.ErrNotFound) {
		return Body{}, syncerr.New(syncerr.CodeNotFound, "segment not found")
	}
	if err != nil {
		return Body{}, err
	}
	if err := e.authorizeDownload(ctx, auth, seg, requested); err != nil {
		return Body{}, err
	}
	return bodyOf(seg), nil
}

// Body is what a download serves: a segment's bytes (Encoding "") or its
// stored body in the content coding Encoding, ByteLength bytes decoded.
type Body struct {
	Bytes      []byte
	Encoding   string
	ByteLength int64
}

func bodyOf(seg Segment) Body {
	if seg.Encoding == "" {
		return Body{Bytes: seg.Bytes, ByteLength: int64(len(seg.Bytes))}
	}
	return Body{Bytes: seg.Bytes, Encoding: seg.Encoding, ByteLength: seg.ByteLength}
}

// authorizeDownload runs the §5.5 re-authorization of a download against
// the publications of seg.
func (e *Engine) authorizeDownload(ctx context.Context, auth Auth, seg Segment, requested map[string][]string) error {
	p, err := e.cfg.Store.Partition(ctx, auth.Partition)
	if err != nil {
		return syncerr.New(syncerr.CodeNotFound, "segment not found")
	}
	var live []Publication
	for _, pub := range seg.Publications {
		if pub.Partition == auth.Partition && pub.LogEpoch == p.LogEpoch {
			live = append(live, pub)
		}
	}
	if len(live) == 0 {
		return syncerr.New(syncerr.CodeNotFound, "segment not found")
	}
	allowed, rerr := e.resolveAllowed(ctx, auth)
	if rerr != nil {
		return syncerr.New(syncerr.CodeForbidden, "scopes could not be resolved")
	}
	now := e.cfg.Now()
	expired := false
	for _, pub := range live {
		t, ok := e.cfg.Schema.Table(pub.Table)
		if !ok {
			continue
		}
		req, valid := requestedMap(requested, func(k string) bool { _, ok := t.VariableColumn(k); return ok })
		if !valid {
			continue
		}
		eff, active := effectiveScopes(req, allowed, true)
		if !active || wire.ScopeDigest(scopeMapToMap(eff)) != pub.ScopeDigest {
			continue
		}
		if now >= pub.ExpiresAtMs || e.predatesCheckpoint(ctx, pub) {
			expired = true
			continue
		}
		return nil
	}
	if expired {
		return syncerr.New(syncerr.CodeSegmentExpired, "segment expired; pull again")
	}
	return syncerr.New(syncerr.CodeForbidden, "the scopes do not authorize this segment")
}

func (e *Engine) resolveAllowed(ctx context.Context, auth Auth) (map[string][]string, error) {
	if e.cfg.Resolve == nil {
		return nil, syncerr.New(syncerr.CodeForbidden, "no scope resolver")
	}
	return e.cfg.Resolve(ctx, ScopeRequest{Partition: auth.Partition, ActorID: auth.ActorID})
}

// requestedMap turns a header scope map into canonical order, refusing
// undeclared keys and "*".
func requestedMap(m map[string][]string, declared func(string) bool) (wire.ScopeMap, bool) {
	out := make(wire.ScopeMap, 0, len(m))
	for k, vals := range m {
		if !declared(k) || containsString(vals, "*") {
			return nil, false
		}
		out = append(out, wire.ScopeValues{Key: k, Values: vals})
	}
	sort.Slice(out, func(i, j int) bool { return wire.CompareKeys(out[i].Key, out[j].Key) < 0 })
	return out, true
}

// predatesCheckpoint reports a publication minted for a schema version
// older than a checkpoint the partition declared since: it is not a whole
// window for the checkpointed projection, so the client must re-pull (a
// fresh descriptor is minted per schema version).
func (e *Engine) predatesCheckpoint(ctx context.Context, pub Publication) bool {
	b, ok := e.cfg.Store.(store.Barrier)
	if !ok {
		return false
	}
	cps, err := b.ReadCheckpoints(ctx, pub.Partition)
	if err != nil {
		return true
	}
	for _, c := range cps {
		if c.SchemaVersion > pub.SchemaVersion {
			return true
		}
	}
	return false
}

// DownloadSigned serves a segment to a verified signed-URL token (§5.4):
// the token's audience must name the partition of a publication of the
// segment under the partition's live log epoch (audienceOf derives it with
// the key that verified the token), and its scope digest must be that
// publication's. No scopes are resolved: authorization was bound at
// issuance, inside the pull. A segment or publication the audience does
// not reach is sync.not_found (no existence leak), another digest
// sync.forbidden, an expired publication sync.segment_expired.
func (e *Engine) DownloadSigned(ctx context.Context, segmentID, aud, scopeDigest string, audienceOf func(partition string) string) (Body, error) {
	if seg, ok := e.hot.get(segmentID); ok {
		if err := e.authorizeSigned(ctx, seg, aud, scopeDigest, audienceOf); err == nil {
			return bodyOf(seg), nil
		}
	}
	seg, err := e.storedSegment(ctx, segmentID)
	if errors.Is(err, store.ErrNotFound) {
		return Body{}, syncerr.New(syncerr.CodeNotFound, "segment not found")
	}
	if err != nil {
		return Body{}, err
	}
	if err := e.authorizeSigned(ctx, seg, aud, scopeDigest, audienceOf); err != nil {
		return Body{}, err
	}
	return bodyOf(seg), nil
}

// authorizeSigned checks a verified token's audience and digest against
// the publications of seg (DownloadSigned).
func (e *Engine) authorizeSigned(ctx context.Context, seg Segment, aud, scopeDigest string, audienceOf func(partition string) string) error {
	notFound := syncerr.New(syncerr.CodeNotFound, "segment not found")
	epochs := map[string]string{}
	reached, expired := false, false
	for _, pub := range seg.Publications {
		if audienceOf(pub.Partition) != aud {
			continue
		}
		epoch, ok := epochs[pub.Partition]
		if !ok {
			p, err := e.cfg.Store.Partition(ctx, pub.Partition)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			epoch = p.LogEpoch
			epochs[pub.Partition] = epoch
		}
		if epoch == "" || pub.LogEpoch != epoch {
			continue
		}
		reached = true
		if pub.ScopeDigest != scopeDigest {
			continue
		}
		if e.cfg.Now() >= pub.ExpiresAtMs || e.predatesCheckpoint(ctx, pub) {
			expired = true
			continue
		}
		return nil
	}
	switch {
	case expired:
		return syncerr.New(syncerr.CodeSegmentExpired, "segment expired; pull again")
	case reached:
		return syncerr.New(syncerr.CodeForbidden, "the token does not authorize this segment")
	}
	return notFound
}
