package sqlitestore

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"modernc.org/libc"
	lib "modernc.org/sqlite/lib"
)

// The WAL of the writer's connection is written through walVFS, a shim
// over SQLite's default (unix) VFS that gathers the WAL file's contiguous
// writes in a buffer and hands them to the file in one write. SQLite
// writes a commit's frames two system calls each (the 24-byte frame
// header, then the page): a push+pull round's batch of ~25 commits is
// ~210 frames, ~420 pwrites, a sixth of the server's CPU.
//
// The buffer is written to the file before anything that could observe
// the file: a read, a sync, a truncate, the file's size, a file control,
// a fetch, a write that does not continue it, and the close. So this
// connection sees the file as if every write had reached it at once. No
// other connection reads a frame before the commit that holds it is
// published in the WAL index, which SQLite does after the commit's sync
// when synchronous is FULL or EXTRA: the shim is used only then (Open
// uses it for the writer when cfg.Synchronous is one of those). A crash
// before the sync loses the buffered frames of a commit that was not
// yet durable, as a crash between two of SQLite's own writes would.
// Windows keeps SQLite's own writes (its file names as URIs differ).

// walVFSName is the name walVFS is registered under.
const walVFSName = "syncgo-walbuf"

// walBufBytes is the largest buffer a WAL file gathers before it writes
// it out: the unix VFS writes at most 0x1ffff bytes per call (it masks
// the length), so a batch's few hundred frames are a handful of writes
// of ~31 frames each.
const walBufBytes = 0x1ffff

// walFileState is kept in the file object SQLite allocates for each file
// of walVFS, after the unix VFS's own (walVFS's szOsFile is the sum): C
// memory, so it holds no Go pointers.
type walFileState struct {
	orig uintptr // the file's own io methods, nil when not buffered
	buf  uintptr // walBufBytes of C memory, 0 until the first write
	off  int64   // the file offset of buf's first byte
	n    int64   // buffered bytes
}

// walShim is the registered VFS: process-wide, as SQLite's VFS list is.
type walShim struct {
	once    sync.Once
	err     error
	unixVFS uintptr // the default VFS walVFS wraps
	stateAt uintptr // offset of walFileState in a file object
	// mu guards methods and unixIO, built by the first WAL file's open.
	mu      sync.Mutex
	methods uintptr // the io methods of a buffered WAL file (C memory)
	unixIO  uintptr // the io methods they wrap
}

var walVFS walShim

// cptr turns an address SQLite handed over into a pointer (a uintptr
// variable converted through memory, as the transpiled library does).
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func walState(pFile uintptr) *walFileState {
	return (*walFileState)(cptr(pFile + walVFS.stateAt))
}

// register registers walVFS with SQLite once.
func (w *walShim) register() error {
	w.once.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		unix := lib.Xsqlite3_vfs_find(tls, 0)
		if unix == 0 {
			w.err = fmt.Errorf("sqlitestore: no default SQLite VFS")
			return
		}
		uv := (*lib.Tsqlite3_vfs)(cptr(unix))
		v := libc.Xmalloc(tls, libc.Tsize_t(unsafe.Sizeof(lib.Tsqlite3_vfs{})))
		name, err := libc.CString(walVFSName)
		if v == 0 || err != nil {
			w.err = fmt.Errorf("sqlitestore: allocating the WAL VFS")
			return
		}
		vv := (*lib.Tsqlite3_vfs)(cptr(v))
		*vv = *uv
		w.unixVFS = unix
		w.stateAt = (uintptr(uv.FszOsFile) + 7) &^ 7
		vv.FszOsFile = int32(w.stateAt + unsafe.Sizeof(walFileState{}))
		vv.FzName = name
		vv.FpNext = 0
		*(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&vv.FxOpen)) = walOpen
		if rc := lib.Xsqlite3_vfs_register(tls, v, 0); rc != lib.SQLITE_OK {
			w.err = fmt.Errorf("sqlitestore: registering the WAL VFS: %d", rc)
		}
	})
	return w.err
}

// ioMethods is the io methods table of a buffered WAL file over orig,
// built the first time (every WAL file of the unix VFS has the same); 0
// when orig is not the table it was built over.
func (w *walShim) ioMethods(tls *libc.TLS, orig uintptr) uintptr {
	if w.methods != 0 {
		if orig != w.unixIO {
			return 0
		}
		return w.methods
	}
	m := libc.Xmalloc(tls, libc.Tsize_t(unsafe.Sizeof(lib.Tsqlite3_io_methods{})))
	if m == 0 {
		return 0
	}
	mm := (*lib.Tsqlite3_io_methods)(cptr(m))
	*mm = *(*lib.Tsqlite3_io_methods)(cptr(orig))
	*(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&mm.FxClose)) = walClose
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&mm.FxRead)) = walRead
	*(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&mm.FxWrite)) = walWrite
	*(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&mm.FxTruncate)) = walTruncate
	*(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&mm.FxSync)) = walSync
	*(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&mm.FxFileSize)) = walFileSize
	*(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&mm.FxFileControl)) = walFileControl
	if mm.FiVersion >= 3 && mm.FxFetch != 0 {
		*(*func(*libc.TLS, uintptr, int64, int32, uintptr) int32)(unsafe.Pointer(&mm.FxFetch)) = walFetch
	}
	w.unixIO, w.methods = orig, m
	return m
}

func walOpen(tls *libc.TLS, pVfs, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	uv := (*lib.Tsqlite3_vfs)(cptr(walVFS.unixVFS))
	open := *(*func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32)(unsafe.Pointer(&uv.FxOpen))
	*walState(pFile) = walFileState{}
	rc := open(tls, walVFS.unixVFS, zName, pFile, flags, pOutFlags)
	if rc != lib.SQLITE_OK || flags&lib.SQLITE_OPEN_WAL == 0 {
		return rc
	}
	f := (*lib.Tsqlite3_file)(cptr(pFile))
	if f.FpMethods == 0 {
		return rc
	}
	walVFS.mu.Lock()
	m := walVFS.ioMethods(tls, f.FpMethods)
	walVFS.mu.Unlock()
	if m != 0 {
		walState(pFile).orig = f.FpMethods
		f.FpMethods = m
	}
	return rc
}

func origOf(pFile uintptr) *lib.Tsqlite3_io_methods {
	return (*lib.Tsqlite3_io_methods)(cptr(walState(pFile).orig))
}

// flush writes the buffered bytes to the file. A failed write drops
// them: SQLite fails the operation that asked (a commit's sync) and
// writes again what it still needs.
func flush(tls *libc.TLS, pFile uintptr) int32 {
	st := walState(pFile)
	if st.n == 0 {
		return lib.SQLITE_OK
	}
	n, off := st.n, st.off
	st.n = 0
	write := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&origOf(pFile).FxWrite))
	return write(tls, pFile, st.buf, int32(n), off)
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	st := walState(pFile)
	amt := int64(iAmt)
	// What is buffered is written first: a write that does not continue
	// it may overwrite part of it (SQLite rewrites a frame in place when
	// a transaction changes a page it already wrote).
	if st.n > 0 && (iOfst != st.off+st.n || st.n+amt > walBufBytes || amt > walBufBytes/2) {
		if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
			return rc
		}
	}
	if amt > walBufBytes/2 {
		write := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&origOf(pFile).FxWrite))
		return write(tls, pFile, zBuf, iAmt, iOfst)
	}
	if st.buf == 0 {
		if st.buf = libc.Xmalloc(tls, walBufBytes); st.buf == 0 {
			return lib.SQLITE_IOERR_NOMEM
		}
	}
	if st.n == 0 {
		st.off = iOfst
	}
	copy(unsafe.Slice((*byte)(cptr(st.buf+uintptr(st.n))), amt), unsafe.Slice((*byte)(cptr(zBuf)), amt))
	st.n += amt
	return lib.SQLITE_OK
}

func walRead(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	read := *(*func(*libc.TLS, uintptr, uintptr, int32, int64) int32)(unsafe.Pointer(&origOf(pFile).FxRead))
	return read(tls, pFile, zBuf, iAmt, iOfst)
}

func walSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	sync := *(*func(*libc.TLS, uintptr, int32) int32)(unsafe.Pointer(&origOf(pFile).FxSync))
	return sync(tls, pFile, flags)
}

func walTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	truncate := *(*func(*libc.TLS, uintptr, int64) int32)(unsafe.Pointer(&origOf(pFile).FxTruncate))
	return truncate(tls, pFile, size)
}

func walFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	size := *(*func(*libc.TLS, uintptr, uintptr) int32)(unsafe.Pointer(&origOf(pFile).FxFileSize))
	return size(tls, pFile, pSize)
}

func walFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	fc := *(*func(*libc.TLS, uintptr, int32, uintptr) int32)(unsafe.Pointer(&origOf(pFile).FxFileControl))
	return fc(tls, pFile, op, pArg)
}

func walFetch(tls *libc.TLS, pFile uintptr, iOfst int64, iAmt int32, pp uintptr) int32 {
	if rc := flush(tls, pFile); rc != lib.SQLITE_OK {
		return rc
	}
	fetch := *(*func(*libc.TLS, uintptr, int64, int32, uintptr) int32)(unsafe.Pointer(&origOf(pFile).FxFetch))
	return fetch(tls, pFile, iOfst, iAmt, pp)
}

func walClose(tls *libc.TLS, pFile uintptr) int32 {
	rc := flush(tls, pFile)
	st := walState(pFile)
	if st.buf != 0 {
		libc.Xfree(tls, st.buf)
		st.buf = 0
	}
	closeFn := *(*func(*libc.TLS, uintptr) int32)(unsafe.Pointer(&origOf(pFile).FxClose))
	if crc := closeFn(tls, pFile); rc == lib.SQLITE_OK {
		rc = crc
	}
	return rc
}

// walURI is the URI filename that opens path through walVFS.
func walURI(path string) string {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	return "file:" + esc + "?vfs=" + walVFSName
}
