package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncgo/syncgo/schema"
)

// SchemaAction is what EnsureSchemaWith would do to a database.
type SchemaAction string

// Schema actions.
const (
	// SchemaCreate: the database has no marker; the app tables would be
	// created.
	SchemaCreate SchemaAction = "create"
	// SchemaMigrate: the marker is older; the tables would be migrated
	// append-only and every fence raised.
	SchemaMigrate SchemaAction = "migrate"
	// SchemaNone: the marker is at the running version and the database
	// holds its layout; nothing would be written.
	SchemaNone SchemaAction = "none"
	// SchemaRefuse: EnsureSchemaWith would refuse with Plan.Refusal.
	SchemaRefuse SchemaAction = "refuse"
	// SchemaUpgradeNeeded: the database was written by an older server
	// line (for example the reference 0.15 to 0.20 line, without
	// _sync_column_versions) and needs an explicit Upgrade first.
	SchemaUpgradeNeeded SchemaAction = "upgrade_needed"
)

// SchemaPlan is the answer of Inspector.PlanSchema.
type SchemaPlan struct {
	Action SchemaAction
	// Refusal is the error EnsureSchemaWith would return (Action
	// SchemaRefuse or SchemaUpgradeNeeded).
	Refusal error
	// Upgrade lists what Upgrader.Upgrade would add, one human-readable
	// line each ("add column todos._sync_column_versions"); empty when
	// nothing is needed.
	Upgrade []string
}

// Inspector is implemented by drivers that can tell, without writing
// anything, what opening with a schema would do. A store opened
// read-only implements it too.
type Inspector interface {
	// PlanSchema reports what EnsureSchemaWith(ctx, s, decls) would do,
	// reading only.
	PlanSchema(ctx context.Context, s *schema.Compiled, decls []CheckpointDeclaration) (SchemaPlan, error)
}

// Upgrader is implemented by drivers that can bring a database written by
// an older server line (the reference 0.15 to 0.20 line, or syncgo before
// a core column existed) to the layout this build needs, without
// rewriting data: columns are added, nothing is dropped or re-encoded, and
// client cursors and the commit log stay valid.
type Upgrader interface {
	// Upgrade adds what is missing for s, in one transaction, and returns
	// what it did (the same lines PlanSchema lists). Idempotent: a second
	// call returns nothing.
	Upgrade(ctx context.Context, s *schema.Compiled) ([]string, error)
}

// UpgradeRequired is the refusal of a database at the running schema
// version that lacks what Upgrade adds (lines, as PlanSchema lists them).
// When all it lacks are declared indexes, the likelier cause is a schema
// whose index declarations changed without a new version, and the message
// says so.
func UpgradeRequired(lines []string, version int32) error {
	msg := "the database was written by an older server line and lacks what this server needs; " +
		"run `syncgo migrate` to upgrade it (it adds columns and tables and rebuilds indexes; it rewrites no data)"
	indexesOnly := len(lines) > 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "create index ") && !strings.HasPrefix(l, "rebuild index ") {
			indexesOnly = false
		}
	}
	if indexesOnly {
		msg = fmt.Sprintf("the schema declares indexes that the database at schema version %d does not have as declared (%s): "+
			"a changed index declaration needs a new schema version, which builds it when the first server of that version starts; "+
			"or run `syncgo migrate` to build them at this version (a database an older server line wrote lacks them too)",
			version, strings.Join(lines, "; "))
	}
	return &Error{Code: CodePhysicalLayoutMismatch, Message: msg,
		Details: map[string]any{"reason": "upgrade_required", "upgrade": lines}}
}
