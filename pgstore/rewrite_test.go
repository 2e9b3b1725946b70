package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/syncgo/syncgo/wire"
)

// TestAppendNullColumnsAsTheCodec: the SQL that a bump runs to append
// NULL columns to stored payloads gives, byte for byte, what the row codec
// encodes for the same values with the NULLs appended, across the null
// bitmap's byte boundaries (1 to 20 columns grown by 1 to 17).
func TestAppendNullColumnsAsTheCodec(t *testing.T) {
	t.Parallel()
	s := openIn(t, newSchema(t), Config{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	types := []wire.ColumnType{wire.TypeString, wire.TypeInteger, wire.TypeFloat, wire.TypeBoolean, wire.TypeJSON, wire.TypeBytes}
	columns := func(n int) []wire.Column {
		cols := []wire.Column{{Name: "id", Type: wire.TypeString}}
		for i := 1; i < n; i++ {
			cols = append(cols, wire.Column{Name: fmt.Sprintf("c%d", i), Type: types[i%len(types)], Nullable: true})
		}
		return cols
	}
	value := func(c wire.Column, i int) wire.Value {
		if c.Nullable && rng.IntN(3) == 0 {
			return wire.Value{Null: true}
		}
		switch c.Type {
		case wire.TypeInteger:
			return wire.Value{Int: rng.Int64N(1 << 40)}
		case wire.TypeFloat:
			return wire.Value{Float: rng.Float64()}
		case wire.TypeBoolean:
			return wire.Value{Bool: rng.IntN(2) == 0}
		case wire.TypeJSON:
			return wire.Value{Str: fmt.Sprintf(`{"k":%d}`, i)}
		case wire.TypeBytes:
			return wire.Value{Bytes: []byte{byte(i), 0xff, 0}}
		}
		return wire.Value{Str: fmt.Sprintf("v%d", i)}
	}
	for n := 1; n <= 20; n++ {
		old, err := wire.NewRowCodec(columns(n), "id")
		if err != nil {
			t.Fatal(err)
		}
		for m := n + 1; m <= n+17; m++ {
			grown, err := wire.NewRowCodec(columns(m), "id")
			if err != nil {
				t.Fatal(err)
			}
			vals := make([]wire.Value, n, m)
			for i, c := range columns(n) {
				vals[i] = value(c, i)
			}
			stored, err := old.AppendRow(nil, vals)
			if err != nil {
				t.Fatal(err)
			}
			for len(vals) < m {
				vals = append(vals, wire.Value{Null: true})
			}
			want, err := grown.AppendRow(nil, vals)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			if err := s.pool.QueryRow(ctx, "SELECT "+appendNullsSQL("p", n, m)+" FROM (SELECT $1::bytea AS p) r", stored).Scan(&got); err != nil {
				t.Fatalf("%d -> %d columns: %v", n, m, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%d -> %d columns: the SQL gave %x, the codec %x (stored %x)", n, m, got, want, stored)
			}
		}
	}
}
