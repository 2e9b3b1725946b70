package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// vectorManifest is the manifest.json of one vector kind.
type vectorManifest struct {
	Kind    string          `json:"kind"`
	Columns json.RawMessage `json:"columns"`
	Cases   []struct {
		Name string `json:"name"`
		Bin  string `json:"bin"`
		JSON string `json:"json"`
	} `json:"cases"`
	Invalid []struct {
		Name  string `json:"name"`
		Bin   string `json:"bin"`
		JSON  string `json:"json"`
		Error string `json:"error"`
	} `json:"invalid"`
}

// vectorsRoot returns the golden-vector directory: SYNCGO_VECTORS_DIR, or
// the copy in testdata/ssp2-vectors (see NOTICE). A missing directory
// fails the test: the vectors are part of the repository.
func vectorsRoot(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SYNCGO_VECTORS_DIR")
	if dir == "" {
		dir = filepath.Join("testdata", "ssp2-vectors")
	}
	if _, err := os.Stat(filepath.Join(dir, "request", "manifest.json")); err != nil {
		t.Fatalf("golden vectors not found at %s: %v", dir, err)
	}
	return dir
}

func readManifest(t *testing.T, dir string) vectorManifest {
	t.Helper()
	var m vectorManifest
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, "manifest.json")), &m); err != nil {
		t.Fatalf("manifest %s: %v", dir, err)
	}
	return m
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertSameJSON compares two JSON documents by value.
func assertSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("rendering is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("expected rendering is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("rendering differs\n got: %s\nwant: %s", got, compactJSON(want))
	}
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

func TestGoldenVectors(t *testing.T) {
	root := vectorsRoot(t)
	for _, set := range []string{"", "v3"} {
		base := filepath.Join(root, set)
		prefix := ""
		if set != "" {
			prefix = set + "/"
		}
		for _, kind := range []string{"request", "response"} {
			t.Run(prefix+kind, func(t *testing.T) { runMessageVectors(t, filepath.Join(base, kind), kind) })
		}
		t.Run(prefix+"segment", func(t *testing.T) { runSegmentVectors(t, filepath.Join(base, "segment")) })
		t.Run(prefix+"realtime", func(t *testing.T) { runRealtimeVectors(t, filepath.Join(base, "realtime")) })
		if set == "v3" {
			t.Run(prefix+"push", func(t *testing.T) { runPushVectors(t, filepath.Join(base, "push")) })
		}
	}
}

func runMessageVectors(t *testing.T, dir, kind string) {
	m := readManifest(t, dir)
	if m.Kind != kind {
		t.Fatalf("manifest kind %q, want %q", m.Kind, kind)
	}
	want := KindRequest
	if kind == "response" {
		want = KindResponse
	}
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			bin := mustRead(t, filepath.Join(dir, c.Bin))
			msg, err := DecodeMessage(bin, DecoderOptions{Kind: want})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := RenderMessage(msg)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			assertSameJSON(t, got, mustRead(t, filepath.Join(dir, c.JSON)))
			re, err := msg.MarshalBinary()
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if !bytes.Equal(re, bin) {
				t.Errorf("re-encoding differs\n got: %x\nwant: %x", re, bin)
			}
			// The streaming decoder over an io.Reader agrees with the
			// byte-slice one.
			streamed, err := ReadMessage(bytes.NewReader(bin), DecoderOptions{Kind: want, MaxFrameBytes: len(bin)})
			if err != nil {
				t.Fatalf("streaming decode: %v", err)
			}
			if !reflect.DeepEqual(streamed, msg) {
				t.Errorf("streaming decode differs from slice decode")
			}
		})
	}
	for _, c := range m.Invalid {
		t.Run("invalid/"+c.Name, func(t *testing.T) {
			bin := mustRead(t, filepath.Join(dir, c.Bin))
			_, err := DecodeMessage(bin, DecoderOptions{Kind: want})
			if err == nil {
				t.Fatalf("decode succeeded, want %s", c.Error)
			}
			if got := ErrorCode(err); got != c.Error {
				t.Errorf("error code %q (%v), want %q", got, err, c.Error)
			}
			if _, err := ReadMessage(bytes.NewReader(bin), DecoderOptions{Kind: want}); ErrorCode(err) != c.Error {
				t.Errorf("streaming decode: %v, want %s", err, c.Error)
			}
		})
	}
}
