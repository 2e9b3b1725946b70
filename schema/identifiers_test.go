package schema

import (
	"strings"
	"testing"
)

func TestCheckIdentifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"tasks", true},
		{"_tasks", true},
		{"Task_2", true},
		{"syncs", true},
		{"my_sync_table", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"sync_x", false},
		{"SYNC_x", false},
		{"_sync", false},
		{"_Sync_version", false},
		{"2tasks", false},
		{"task list", false},
		{"task-list", false},
		{"tâche", false},
		{`"quoted"`, false},
	}
	for _, tt := range tests {
		err := checkIdentifier("table", tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("checkIdentifier(%q) = %v, want ok %t", tt.name, err, tt.ok)
		}
	}
}

func TestPhysicalIndexName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		declared, want string
	}{
		{"tasks_by_project", "sync_ix_tasks_by_project"},
		// 8 + 55 = 63 bytes: still fits.
		{strings.Repeat("i", 55), "sync_ix_" + strings.Repeat("i", 55)},
		// 8 + 56 = 64 bytes: hashed. FNV-1a 64 of 56 × "i".
		{strings.Repeat("i", 56), "sync_ix_8f48ecbc7a1e8b6d"},
		{strings.Repeat("c", 56), "sync_ix_de34b3d5b2af79fd"},
		// Bytes, not characters, count: 28 × "ü" is 56 bytes.
		{strings.Repeat("ü", 28), "sync_ix_af614357ce4271c5"},
	}
	for _, tt := range tests {
		got := PhysicalIndexName(tt.declared)
		if got != tt.want {
			t.Errorf("PhysicalIndexName(%q) = %q, want %q", tt.declared, got, tt.want)
		}
		if len(got) > MaxIdentifierBytes {
			t.Errorf("PhysicalIndexName(%q) is %d bytes", tt.declared, len(got))
		}
	}
}
