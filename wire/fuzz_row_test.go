package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// addVectorSeeds adds every .bin file of the given vector directories
// (valid and invalid cases) to the corpus, when the vectors are present.
func addVectorSeeds(f *testing.F, dirs ...string) {
	root := os.Getenv("SYNCGO_VECTORS_DIR")
	if root == "" {
		root = filepath.Join("testdata", "ssp2-vectors")
	}
	for _, dir := range dirs {
		for _, pattern := range []string{"*.bin", "invalid/*.bin"} {
			files, _ := filepath.Glob(filepath.Join(root, dir, pattern))
			for _, file := range files {
				if b, err := os.ReadFile(file); err == nil {
					f.Add(b)
				}
			}
		}
	}
}

func FuzzDecodeSegment(f *testing.F) {
	addVectorSeeds(f, "segment", filepath.Join("v3", "segment"))
	for _, sizes := range [][]int{{}, {1}, {2, 1}} {
		if b, err := EncodeSegment(smallSegment(f, sizes...)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seg, err := DecodeSegment(b)
		verr := ValidateSegment(b)
		serr := streamSegmentErr(bytes.NewReader(b))
		if (err == nil) != (verr == nil) || (err == nil) != (serr == nil) {
			t.Fatalf("DecodeSegment err %v, ValidateSegment err %v, SegmentReader err %v", err, verr, serr)
		}
		if err != nil {
			if ErrorCode(err) != CodeInvalidRequest || ErrorCode(verr) != CodeInvalidRequest ||
				ErrorCode(serr) != CodeInvalidRequest {
				t.Fatalf("non-protocol errors: %v / %v / %v", err, verr, serr)
			}
			return
		}
		enc, err := EncodeSegment(seg)
		if err != nil {
			t.Fatalf("EncodeSegment of a decoded segment: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs\n got %x\nwant %x", enc, b)
		}
		if _, err := RenderSegment(seg); err != nil {
			t.Fatalf("RenderSegment: %v", err)
		}
	})
}

func FuzzDecodeRow(f *testing.F) {
	c := mustCodec(f, testColumns(), "id")
	addRowSeeds(f, c)
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := c.DecodeRow(b)
		if err != nil {
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("non-protocol error %v", err)
			}
			return
		}
		enc, err := c.AppendRow(nil, vals)
		if err != nil {
			t.Fatalf("AppendRow of a decoded row: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs\n got %x\nwant %x", enc, b)
		}
		if _, err := json.Marshal(RenderRowValues(testColumns(), vals)); err != nil {
			t.Fatalf("rendering does not marshal: %v", err)
		}
	})
}

func FuzzDecodeSparseRow(f *testing.F) {
	addVectorSeeds(f, filepath.Join("v3", "push"))
	cols := testColumns()[:9] // the push-vector table
	c := mustCodec(f, cols, "id")
	f.Add([]byte{0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 'k'})
	f.Fuzz(func(t *testing.T, b []byte) {
		row, err := c.DecodeSparse(b)
		if err != nil {
			if ErrorCode(err) != CodeInvalidRequest {
				t.Fatalf("non-protocol error %v", err)
			}
			return
		}
		enc, err := c.AppendSparse(nil, row)
		if err != nil {
			t.Fatalf("AppendSparse of a decoded row: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs\n got %x\nwant %x", enc, b)
		}
		if _, err := json.Marshal(RenderSparseRow(cols, row)); err != nil {
			t.Fatalf("rendering does not marshal: %v", err)
		}
	})
}

// FuzzValidJSON checks validJSON against json.Valid on UTF-8 input, and
// that every string ValidBlobRef accepts is a JSON document.
func FuzzValidJSON(f *testing.F) {
	for _, s := range validJSONSamples() {
		f.Add(s)
	}
	f.Add(`{"blobId":"` + testBlobID + `","byteLength":12,"mediaType":"text/plain","name":"a\u00e9"}`)
	f.Fuzz(func(t *testing.T, s string) {
		if ValidBlobRef(s) && !json.Valid([]byte(s)) {
			t.Fatalf("ValidBlobRef accepts %q, which is not JSON", s)
		}
		if !utf8.ValidString(s) {
			return
		}
		if got, want := validJSON(s), json.Valid([]byte(s)); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", s, got, want)
		}
	})
}

func validJSONSamples() []string {
	return []string{
		``, ` `, `7`, `-0`, `-`, `01`, `1.`, `1.5e`, `1.5e+3`, `1E-2`, `-1.0e10`, `true`, `tru`, `truex`,
		`null`, `false`, `"x"`, `"\u00e9\n\/"`, `"\x"`, `"\u12G4"`, "\"a\tb\"", `"open`, ` {} `, `{ }`,
		`[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1,}`, `{"a" : [1, {"b": null}], "c": "d"}`, `{1:2}`,
		`{"a"}`, `{"a":}`, `[[[]]]`, `[[[]]`, `[]]`, `{"a":1}}`, `{"tags": ["a", "b"],  "unicode": "𝔘"}`,
		"\t[\r\n1\n]\t", `"𝄞"`, `[-]`, `[.5]`, `[1e5]`, `{"":""}`, `[true,false,null]`,
	}
}

func TestValidJSONMatchesStdlib(t *testing.T) {
	samples := validJSONSamples()
	for _, depth := range []int{63, 64, 65, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		samples = append(samples, strings.Repeat("[", depth)+strings.Repeat("]", depth))
		samples = append(samples, strings.Repeat(`{"a":`, depth)+"1"+strings.Repeat("}", depth))
	}
	for _, s := range samples {
		if got, want := validJSON(s), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid = %v", s, got, want)
		}
	}
}

// addRowSeeds adds the row fuzzers' seeds: two valid rows of testColumns
// in c's codec and a truncated one.
func addRowSeeds(f *testing.F, c *RowCodec) {
	seeds := [][]Value{
		{{Str: "n-1"}, {Null: true}, {Str: ""}, {Null: true}, {Float: 3.5}, {Bool: true},
			{Str: `{"tags": ["a"]}`}, {Null: true}, {Null: true}, {Null: true}},
		{{Str: "n-2"}, {Str: "ζ"}, {Str: "b"}, {Int: -MaxSafeInteger}, {Float: -1.5}, {},
			{Null: true}, {Bytes: []byte{0, 1}}, {Bytes: []byte{}}, {Str: `{"blobId":"` + testBlobID + `","byteLength":7,"name":"a.txt"}`}},
	}
	for _, row := range seeds {
		if b, err := c.AppendRow(nil, row); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{0xff, 0x03})
}
