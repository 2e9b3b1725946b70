package wire

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
)

// runRealtimeVectors checks one realtime vector directory: every valid case
// parses and re-renders to the same JSON value, and every invalid case is
// refused with the manifest's error code.
func runRealtimeVectors(t *testing.T, dir string) {
	m := readManifest(t, dir)
	if m.Kind != "realtime" {
		t.Fatalf("manifest kind %q, want realtime", m.Kind)
	}
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			src := mustRead(t, filepath.Join(dir, c.JSON))
			got, err := parseRealtimeVector(t, src)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			assertSameJSON(t, got, src)
			// The vectors are JSON.stringify output, so field order must match too.
			if want := compactJSON(src); !bytes.Equal(got, want) {
				t.Errorf("field order differs\n got: %s\nwant: %s", got, want)
			}
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			_, err := parseRealtimeVector(t, mustRead(t, filepath.Join(dir, c.JSON)))
			if got := ErrorCode(err); got != c.Error {
				t.Errorf("error code = %q (%v), want %q", got, err, c.Error)
			}
		})
	}
}

// parseRealtimeVector parses src with the parser of its direction and
// re-renders it. A message with "type" is client→server; so is a presence
// event whose data has neither kind nor error — the §8.6.2 publish shape,
// the only client→server message that carries "event". Everything else is
// server→client.
func parseRealtimeVector(t *testing.T, src []byte) ([]byte, error) {
	t.Helper()
	var probe struct {
		Event *string                    `json:"event"`
		Type  *string                    `json:"type"`
		Data  map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(src, &probe); err != nil {
		t.Fatalf("vector is not JSON: %v", err)
	}
	_, hasKind := probe.Data["kind"]
	_, hasError := probe.Data["error"]
	client := probe.Type != nil ||
		(probe.Event != nil && *probe.Event == "presence" && !hasKind && !hasError)
	if client {
		msg, err := ParseClientMessage(src)
		if err != nil {
			return nil, err
		}
		return msg.MarshalJSON()
	}
	ev, err := ParseServerEvent(src)
	if err != nil {
		return nil, err
	}
	if u, ok := ev.(UnknownEvent); ok {
		t.Fatalf("vector event %q parsed as unknown", u.Name)
	}
	return AppendServerEvent(nil, ev), nil
}

func TestRealtimeVectorsLocal(t *testing.T) {
	root := vectorsRoot(t)
	for _, set := range []string{"realtime", "v3/realtime"} {
		t.Run(set, func(t *testing.T) { runRealtimeVectors(t, filepath.Join(root, set)) })
	}
}
