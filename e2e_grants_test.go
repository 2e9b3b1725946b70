package syncgo_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/syncerr"
	"github.com/syncgo/syncgo/wire"
)

// postAs sends a request body as an actor, without the testing.T (it
// runs on goroutines of its own).
func (e *e2eEnv) postAs(actor string, body []byte) (rawResponse, error) {
	req, err := http.NewRequest(http.MethodPost, e.url+"/sync", bytes.NewReader(body))
	if err != nil {
		return rawResponse{}, err
	}
	req.Header.Set("Content-Type", sspclient.ContentType)
	req.Header.Set("Authorization", "Bearer "+actor)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rawResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// Two actors push with the same fresh clientId and the same
// clientCommitId at the same moment (finding 3 of issue 15): the clientId
// is bound to exactly one of them, the other is refused with
// sync.invalid_client_id before any push result is read, and no actor ever
// gets the other's cached result while its own write is dropped.
func TestE2EClientIDCaptureRace(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newE2EEnv(t, d)
		seed := e.client("seed", sspclient.Options{})
		syncQuiet(t, seed)
		epoch := e.partitionState().LogEpoch
		actors := []string{"alice", "bob"}
		const iterations = 40
		captures, bothApplied := 0, 0
		for i := range iterations {
			clientID := fmt.Sprintf("shared-device-%d", i)
			bodies := make([][]byte, len(actors))
			for j, actor := range actors {
				op := e.upsertOp(t, taskRow(fmt.Sprintf("%s-%d", actor, i), "p1", actor))
				bodies[j] = encodeRequest(t, &wire.Request{Version: 3,
					Header:  &wire.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
					Commits: []*wire.PushCommit{{ClientCommitID: "commit-1", Operations: []wire.Operation{op}}}})
			}
			resps := make([]rawResponse, len(actors))
			errs := make([]error, len(actors))
			var wg sync.WaitGroup
			start := make(chan struct{})
			for j, actor := range actors {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					resps[j], errs[j] = e.postAs(actor, bodies[j])
				}()
			}
			close(start)
			wg.Wait()
			rows := e.serverRows("tasks")
			applied := 0
			for j, actor := range actors {
				if errs[j] != nil {
					t.Fatalf("iteration %d, %s: %v", i, actor, errs[j])
				}
				r := resps[j]
				if r.status != http.StatusOK {
					wantJSONError(t, r, http.StatusBadRequest, syncerr.CodeInvalidClientID)
					continue
				}
				m := decodeResponse(t, r)
				var pr *wire.PushResult
				for _, f := range m.Frames {
					if p, ok := f.(*wire.PushResult); ok {
						pr = p
					}
				}
				_, own := rows[fmt.Sprintf("%s-%d", actor, i)]
				switch {
				case pr == nil:
					t.Fatalf("iteration %d, %s: 200 without a PUSH_RESULT", i, actor)
				case pr.Status != wire.PushApplied || !own:
					captures++
					t.Errorf("iteration %d, %s: PUSH_RESULT %v (seq %d), own row stored: %v; want applied and stored",
						i, actor, pr.Status, pr.CommitSeq, own)
				default:
					applied++
				}
			}
			if applied > 1 {
				bothApplied++
			}
			if applied == 0 && captures == 0 {
				t.Errorf("iteration %d: neither actor applied", i)
			}
		}
		if captures != 0 || bothApplied != 0 {
			t.Fatalf("%d of %d races captured a result, %d bound one clientId to two actors; want 0", captures, iterations, bothApplied)
		}
	})
}
