package wire

import "math/bits"

// SparseRow is a decoded sparse row, the payload of a push upsert at wire
// version 3 (§2.4 "Sparse rows", §6.1). Present and Values both have one
// entry per column in declaration order; Values[i] is meaningful only when
// Present[i]. An absent column keeps its stored value when the row is
// applied; a present NULL is Values[i].Null.
type SparseRow struct {
	Present []bool
	Values  []Value
}

// DecodeSparse decodes one sparse row; b must hold exactly one row. The
// checks run in the order of §2.4: a set presence padding bit, an absent
// primary-key column, a set null-bitmap padding bit (a null for an absent
// column), a null bit for a non-nullable column, then the values. Every
// failure is a *DecodeError with code sync.invalid_request. The returned
// string values alias b.
func (c *RowCodec) DecodeSparse(b []byte) (SparseRow, error) {
	r := reader{b: b}
	if c.pk < 0 {
		r.fail("sparse row codec has no primary-key column")
		return SparseRow{}, r.err
	}
	presence := r.take(c.bitmapLen, "sparse row presence bitmap")
	if r.err != nil {
		return SparseRow{}, r.err
	}
	if c.bitmapLen > 0 && presence[c.bitmapLen-1]&c.padMask != 0 {
		r.fail("sparse row presence bitmap has a set padding bit")
		return SparseRow{}, r.err
	}
	if presence[c.pk>>3]&(1<<(c.pk&7)) == 0 {
		r.fail("sparse row is missing the primary-key column %s", c.cols[c.pk].Name)
		return SparseRow{}, r.err
	}
	count := 0
	for _, p := range presence {
		count += bits.OnesCount8(p)
	}
	nullLen := (count + 7) / 8
	nulls := r.take(nullLen, "sparse row null bitmap")
	if r.err != nil {
		return SparseRow{}, r.err
	}
	if count%8 != 0 && nulls[nullLen-1]&(^byte(0)<<(count%8)) != 0 {
		r.fail("sparse row null bitmap sets a null bit for an absent column")
		return SparseRow{}, r.err
	}
	j := 0
	for i := range c.cols {
		if presence[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		if nulls[j>>3]&(1<<(j&7)) != 0 && !c.cols[i].Nullable {
			r.fail("null bit set for non-nullable column %s", c.cols[i].Name)
			return SparseRow{}, r.err
		}
		j++
	}
	row := SparseRow{Present: make([]bool, len(c.cols)), Values: make([]Value, len(c.cols))}
	j = 0
	for i := range c.cols {
		if presence[i>>3]&(1<<(i&7)) == 0 {
			continue
		}
		row.Present[i] = true
		isNull := nulls[j>>3]&(1<<(j&7)) != 0
		j++
		if isNull {
			row.Values[i].Null = true
			continue
		}
		c.readValue(&r, i, &row.Values[i])
		if r.err != nil {
			return SparseRow{}, r.err
		}
	}
	r.finish("sparse row")
	if r.err != nil {
		return SparseRow{}, r.err
	}
	return row, nil
}

// AppendSparse appends the canonical sparse-row encoding of row to dst. It
// refuses, with an *EncodeError, slices of the wrong length, an absent
// primary key, a NULL in a non-nullable column and every value AppendRow
// refuses. On error dst is returned unchanged.
func (c *RowCodec) AppendSparse(dst []byte, row SparseRow) ([]byte, error) {
	n := len(c.cols)
	if len(row.Present) != n || len(row.Values) != n {
		return dst, encodeErrorf("sparse row has %d presence flags and %d values for %d columns",
			len(row.Present), len(row.Values), n)
	}
	if c.pk < 0 {
		return dst, encodeErrorf("sparse row codec has no primary-key column")
	}
	if !row.Present[c.pk] {
		return dst, encodeErrorf("sparse row is missing the primary-key column %s", c.cols[c.pk].Name)
	}
	start := len(dst)
	count := 0
	for _, p := range row.Present {
		if p {
			count++
		}
	}
	nullStart := start + c.bitmapLen
	w := writer{b: append(dst, make([]byte, c.bitmapLen+(count+7)/8)...)}
	j := 0
	for i, p := range row.Present {
		if !p {
			continue
		}
		w.b[start+(i>>3)] |= 1 << (i & 7)
		if row.Values[i].Null {
			if !c.cols[i].Nullable {
				return dst[:start], encodeErrorf("column %s is not nullable", c.cols[i].Name)
			}
			w.b[nullStart+(j>>3)] |= 1 << (j & 7)
		}
		j++
	}
	for i, p := range row.Present {
		if p && !row.Values[i].Null {
			c.appendValue(&w, i, &row.Values[i])
		}
	}
	if w.err != nil {
		return dst[:start], w.err
	}
	return w.b, nil
}
