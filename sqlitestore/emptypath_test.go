package sqlitestore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/syncgo/syncgo/sqlitestore"
)

// TestOpenRefusesEmptyPath: a Config whose Path was left empty (an unset
// environment variable, say) is refused, naming the field, rather than
// opened as a throw-away database whose every commit is deleted on Close;
// MemoryPath still opens one on purpose.
func TestOpenRefusesEmptyPath(t *testing.T) {
	ctx := context.Background()
	for _, ro := range []bool{false, true} {
		st, err := sqlitestore.Open(ctx, sqlitestore.Config{ReadOnly: ro})
		if err == nil {
			st.Close()
			t.Fatalf("Open with an empty Path (ReadOnly %v) succeeded", ro)
		}
		if !strings.Contains(err.Error(), "Config.Path") || !strings.Contains(err.Error(), "MemoryPath") {
			t.Errorf("Open with an empty Path: %v; want it to name Config.Path and MemoryPath", err)
		}
	}
	st, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: sqlitestore.MemoryPath})
	if err != nil {
		t.Fatalf("Open(MemoryPath): %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
