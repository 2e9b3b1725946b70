package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// rowsManifest is the manifest.json of the segment and push vector kinds.
type rowsManifest struct {
	Kind    string `json:"kind"`
	Columns []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Nullable bool   `json:"nullable"`
	} `json:"columns"`
	PrimaryKey string `json:"primaryKey"`
	Cases      []struct {
		Name string `json:"name"`
		Bin  string `json:"bin"`
		JSON string `json:"json"`
	} `json:"cases"`
	Invalid []struct {
		Name  string `json:"name"`
		Bin   string `json:"bin"`
		Error string `json:"error"`
	} `json:"invalid"`
}

func loadRowsManifest(t *testing.T, dir string) *rowsManifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	var m rowsManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	if len(m.Cases) == 0 {
		t.Fatalf("manifest in %s lists no cases", dir)
	}
	return &m
}

func readVector(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

// assertRendering compares a rendering with the expected .json file after
// unmarshalling both into any.
func assertRendering(t *testing.T, got any, wantJSON []byte) {
	t.Helper()
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("marshal rendering: %v", err)
	}
	var g, w any
	if err := json.Unmarshal(gotJSON, &g); err != nil {
		t.Fatalf("unmarshal rendering: %v", err)
	}
	if err := json.Unmarshal(wantJSON, &w); err != nil {
		t.Fatalf("unmarshal expected: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("rendering mismatch\n got: %s\nwant: %s", gotJSON, wantJSON)
	}
}

// runSegmentVectors checks the segment vectors in dir: decode, render,
// re-encode (whole and streamed) and the invalid cases' error codes.
func runSegmentVectors(t *testing.T, dir string) {
	m := loadRowsManifest(t, dir)
	for _, tc := range m.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			bin := readVector(t, dir, tc.Bin)
			seg, err := DecodeSegment(bin)
			if err != nil {
				t.Fatalf("DecodeSegment: %v", err)
			}
			if err := ValidateSegment(bin); err != nil {
				t.Errorf("ValidateSegment: %v", err)
			}
			rendered, err := RenderSegment(seg)
			if err != nil {
				t.Fatalf("RenderSegment: %v", err)
			}
			assertRendering(t, rendered, readVector(t, dir, tc.JSON))
			enc, err := EncodeSegment(seg)
			if err != nil {
				t.Fatalf("EncodeSegment: %v", err)
			}
			if !bytes.Equal(enc, bin) {
				t.Errorf("EncodeSegment bytes differ\n got: %x\nwant: %x", enc, bin)
			}
			var buf bytes.Buffer
			sw, err := NewSegmentWriter(&buf, seg.Header)
			if err != nil {
				t.Fatalf("NewSegmentWriter: %v", err)
			}
			for _, block := range seg.Blocks {
				if err := sw.WriteBlock(block); err != nil {
					t.Fatalf("WriteBlock: %v", err)
				}
			}
			if err := sw.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if !bytes.Equal(buf.Bytes(), bin) {
				t.Errorf("SegmentWriter bytes differ\n got: %x\nwant: %x", buf.Bytes(), bin)
			}
			// The same rows through WriteStoredRow (the server's path for
			// its stored rows), blocks cut by BlockRows: the same bytes.
			if uniformBlocks(seg.Blocks) {
				var stored bytes.Buffer
				sw, err := NewSegmentWriter(&stored, seg.Header)
				if err != nil {
					t.Fatalf("NewSegmentWriter: %v", err)
				}
				sw.BlockRows = len(seg.Blocks[0])
				for _, block := range seg.Blocks {
					for _, row := range block {
						if err := sw.WriteStoredRow(row.ServerVersion, row.Row); err != nil {
							t.Fatalf("WriteStoredRow: %v", err)
						}
					}
				}
				if err := sw.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if !bytes.Equal(stored.Bytes(), bin) {
					t.Errorf("WriteStoredRow bytes differ\n got: %x\nwant: %x", stored.Bytes(), bin)
				}
			} else {
				t.Logf("blocks of unequal row counts: WriteStoredRow not compared")
			}
			streamed := readSegmentStream(t, bytes.NewReader(bin))
			if !reflect.DeepEqual(streamed, seg) {
				t.Errorf("SegmentReader gives %+v, DecodeSegment %+v", streamed, seg)
			}
		})
	}
	for _, tc := range m.Invalid {
		t.Run("invalid/"+tc.Name, func(t *testing.T) {
			bin := readVector(t, dir, tc.Bin)
			_, err := DecodeSegment(bin)
			if got := ErrorCode(err); got != tc.Error {
				t.Errorf("DecodeSegment error = %v (code %q), want code %q", err, got, tc.Error)
			}
			if got := ErrorCode(ValidateSegment(bin)); got != tc.Error {
				t.Errorf("ValidateSegment code = %q, want %q", got, tc.Error)
			}
			if got := ErrorCode(streamSegmentErr(bytes.NewReader(bin))); got != tc.Error {
				t.Errorf("SegmentReader code = %q, want %q", got, tc.Error)
			}
		})
	}
}

// readSegmentStream reads a whole segment with a SegmentReader, copying
// each block because the reader reuses its buffers.
func readSegmentStream(t *testing.T, r io.Reader) *Segment {
	t.Helper()
	sr, err := NewSegmentReader(r, 0)
	if err != nil {
		t.Fatalf("NewSegmentReader: %v", err)
	}
	s := &Segment{Header: sr.Header()}
	for {
		rows, err := sr.NextBlock()
		if errors.Is(err, io.EOF) {
			return s
		}
		if err != nil {
			t.Fatalf("NextBlock: %v", err)
		}
		block := make([]SegmentRow, len(rows))
		for i, row := range rows {
			block[i] = SegmentRow{ServerVersion: row.ServerVersion, Row: bytes.Clone(row.Row)}
		}
		s.Blocks = append(s.Blocks, block)
	}
}

// streamSegmentErr reads a whole segment with a SegmentReader and returns
// the first error other than the final io.EOF.
func streamSegmentErr(r io.Reader) error {
	sr, err := NewSegmentReader(r, 0)
	if err != nil {
		return err
	}
	for {
		if _, err := sr.NextBlock(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// runPushVectors checks the sparse-row push vectors in dir against the
// column table of their manifest.
func runPushVectors(t *testing.T, dir string) {
	m := loadRowsManifest(t, dir)
	cols := make([]Column, len(m.Columns))
	for i, c := range m.Columns {
		typ, ok := ParseColumnType(c.Type)
		if !ok {
			t.Fatalf("manifest column %s has unknown type %q", c.Name, c.Type)
		}
		cols[i] = Column{Name: c.Name, Type: typ, Nullable: c.Nullable}
	}
	codec, err := NewRowCodec(cols, m.PrimaryKey)
	if err != nil {
		t.Fatalf("NewRowCodec: %v", err)
	}
	for _, tc := range m.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			bin := readVector(t, dir, tc.Bin)
			row, err := codec.DecodeSparse(bin)
			if err != nil {
				t.Fatalf("DecodeSparse: %v", err)
			}
			assertRendering(t, RenderSparseRow(cols, row), readVector(t, dir, tc.JSON))
			enc, err := codec.AppendSparse(nil, row)
			if err != nil {
				t.Fatalf("AppendSparse: %v", err)
			}
			if !bytes.Equal(enc, bin) {
				t.Errorf("AppendSparse bytes differ\n got: %x\nwant: %x", enc, bin)
			}
		})
	}
	for _, tc := range m.Invalid {
		t.Run("invalid/"+tc.Name, func(t *testing.T) {
			_, err := codec.DecodeSparse(readVector(t, dir, tc.Bin))
			if got := ErrorCode(err); got != tc.Error {
				t.Errorf("DecodeSparse error = %v (code %q), want code %q", err, got, tc.Error)
			}
		})
	}
}

// rowsVectorsRoot returns the golden-vector directory (SYNCGO_VECTORS_DIR,
// or the copy in testdata/ssp2-vectors); a missing directory fails the
// test.
func rowsVectorsRoot(t *testing.T) string {
	t.Helper()
	root := os.Getenv("SYNCGO_VECTORS_DIR")
	if root == "" {
		root = filepath.Join("testdata", "ssp2-vectors")
	}
	if _, err := os.Stat(filepath.Join(root, "v3", "push", "manifest.json")); err != nil {
		t.Fatalf("golden vectors missing: %v", err)
	}
	return root
}

func TestRowsVectorsLocal(t *testing.T) {
	root := rowsVectorsRoot(t)
	t.Run("segment", func(t *testing.T) { runSegmentVectors(t, filepath.Join(root, "segment")) })
	t.Run("v3/segment", func(t *testing.T) { runSegmentVectors(t, filepath.Join(root, "v3", "segment")) })
	t.Run("v3/push", func(t *testing.T) { runPushVectors(t, filepath.Join(root, "v3", "push")) })
}

// uniformBlocks reports blocks that BlockRows alone reproduces: all but
// the last hold as many rows as the first, the last no more.
func uniformBlocks(blocks [][]SegmentRow) bool {
	if len(blocks) == 0 {
		return false
	}
	n := len(blocks[0])
	for i, b := range blocks {
		if len(b) > n || (i < len(blocks)-1 && len(b) != n) {
			return false
		}
	}
	return true
}
