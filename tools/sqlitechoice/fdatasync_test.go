package sqlitechoice

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// benchFdatasync is the disk's limit without SQLite: write one 4 KiB page and
// fdatasync it (SQLite on Linux syncs with fdatasync), cycling over 1,000
// pages like a WAL file that is reset after each checkpoint.
func benchFdatasync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "sync.bin"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		page[0] = byte(i)
		if _, err := f.WriteAt(page, int64(i%1000)*4096); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
}
