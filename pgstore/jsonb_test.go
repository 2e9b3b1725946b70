package pgstore

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncgo/syncgo/internal/jsonb"
	"github.com/syncgo/syncgo/wire"
)

// jsonb.Holds says what Postgres's own jsonb input says, for the values it
// refuses (a NUL escape, lone surrogates, numbers past numeric's range)
// and for those next to them that it takes.
func TestJSONBHoldsAgreesWithPostgres(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	values := []string{
		`{"a":1}`, `[1,2.5,-3e2,true,null,"x"]`, `"plain"`, `""`,
		`"\u0000"`, `"a\u0000b"`, `"\\u0000"`, `"\\\u0000"`,
		`"\ud800"`, `"\udc00"`, `"\ud800\udc00"`, `"\uD83D\uDE00"`, `"\ud800x"`, `"\ud800\u0041"`,
		`"\udbff\udfff"`, `"\\ud800"`, `{"\ud800":1}`, `["\ud800\udc00","\udfff"]`,
		`1e131071`, `1e131072`, `9.9e131071`, `12345e131067`, `12345e131068`, `-1e131072`, `1E+131071`,
		`1e-16383`, `1e-16384`, `1.5e-16383`, `0.1e-16382`, `0.1e-16383`, `100e-16385`,
		`0e999999`, `0e-999999`, `0.0e-16384`, `0.00e-16381`, `0.001e131074`, `0.001e131075`,
		`1e999999999999999999999`, `1e-999999999999999999999`, `{"a":1e-999999}`, `[0.5e16383]`,
		`0e999999999999999999999`, `0e1073741822`, `0e1073741823`, `0.0e1073741823`, `0e-1073741823`, `[0e2147483648]`,
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	for range 300 {
		ip := []string{"0", "1", "7", "12345", "100"}[rng.IntN(5)]
		fp := []string{"", ".0", ".1", ".001", ".12345", ".00"}[rng.IntN(6)]
		exp := []int{131067, 131068, 131071, 131072, 131073, -16381, -16382, -16383, -16384, -16385, 0, 5}[rng.IntN(12)] + rng.IntN(5) - 2
		values = append(values, fmt.Sprintf("%s%se%d", ip, fp, exp))
	}
	for _, v := range values {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_input_is_valid($1, 'jsonb')", v).Scan(&ok); err != nil {
			// Before Postgres 16: try the cast in a savepoint.
			ok = castsToJSONB(t, conn, v)
		}
		if got := jsonb.Holds(v); got != ok {
			t.Errorf("jsonb.Holds(%.60s) = %v; Postgres says %v", v, got, ok)
		}
	}
}

func castsToJSONB(t *testing.T, conn *pgx.Conn, v string) bool {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	return tx.QueryRow(ctx, "SELECT length($1::jsonb::text)", v).Scan(&n) == nil
}

// jsonb.Holds reads any text without panicking, whatever its escapes and
// number shapes, and what it refuses the typed column stores as NULL.
func FuzzJSONBHolds(f *testing.F) {
	for _, s := range []string{`"\ud800\udc00"`, `"\ud800\`, `"\u12`, `1e-`, `-`, `0.e5`, `1e99999999999999999999999`, `"\\\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ok := jsonb.Holds(s)
		if v := projectValue(wire.TypeJSON, wire.Value{Str: s}); (v == nil) == ok {
			t.Fatalf("projectValue(%q) = %v, jsonbHolds %v", s, v, ok)
		}
	})
}
