// Package schematest holds schemas that tests of several packages share.
package schematest

import (
	"testing"

	"github.com/syncgo/syncgo/schema"
)

// Items is a one-table schema (version 1) whose table "items" has a
// column of every type, all nullable but its key and scope column
// (project:{project_id}): the fuzz targets of the JSON row decoders use
// it.
func Items(tb testing.TB) *schema.Compiled {
	tb.Helper()
	sc, err := schema.New(1).
		Table("items", "id", schema.String("id"), schema.String("project_id"), schema.Integer("n").Null(),
			schema.Float("f").Null(), schema.Boolean("ok").Null(), schema.JSON("meta").Null(), schema.Bytes("raw").Null()).
		Scope("project:{project_id}").Compile()
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}
