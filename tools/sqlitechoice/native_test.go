package sqlitechoice

import (
	"fmt"

	"github.com/ncruces/go-sqlite3"
	zsqlite "zombiezen.com/go/sqlite"
)

// Adapters for the native (non database/sql) APIs. Both bind by position and
// step/reset statements directly; blobs are copied into a reused buffer.

// zombiezen.com/go/sqlite

type zConn struct{ c *zsqlite.Conn }

func openZombiezen(path string) (Conn, error) {
	c, err := zsqlite.OpenConn(path, zsqlite.OpenReadWrite|zsqlite.OpenCreate)
	if err != nil {
		return nil, err
	}
	return zConn{c}, nil
}

func (z zConn) Exec(query string) error {
	st, _, err := z.c.PrepareTransient(query)
	if err != nil {
		return err
	}
	defer st.Finalize()
	for {
		row, err := st.Step()
		if err != nil || !row {
			return err
		}
	}
}

func (z zConn) Prepare(query string) (Stmt, error) {
	st, err := z.c.Prepare(query) // cached by the connection
	if err != nil {
		return nil, err
	}
	return zStmt{st}, nil
}

func (z zConn) Close() error { return z.c.Close() }

type zStmt struct{ st *zsqlite.Stmt }

func (s zStmt) bind(args []any) error {
	for i, a := range args {
		switch v := a.(type) {
		case int64:
			s.st.BindInt64(i+1, v)
		case int:
			s.st.BindInt64(i+1, int64(v))
		case string:
			s.st.BindText(i+1, v)
		case []byte:
			if v == nil {
				s.st.BindNull(i + 1)
			} else {
				s.st.BindBytes(i+1, v)
			}
		case nil:
			s.st.BindNull(i + 1)
		default:
			return fmt.Errorf("unsupported argument type %T", a)
		}
	}
	return nil
}

func (s zStmt) scan(dest []any) error {
	for i, d := range dest {
		switch p := d.(type) {
		case *int64:
			*p = s.st.ColumnInt64(i)
		case *string:
			*p = s.st.ColumnText(i)
		case *[]byte:
			n := s.st.ColumnLen(i)
			if cap(*p) < n {
				*p = make([]byte, n)
			}
			*p = (*p)[:n]
			s.st.ColumnBytes(i, *p)
		default:
			return fmt.Errorf("unsupported scan type %T", d)
		}
	}
	return nil
}

func (s zStmt) Exec(args ...any) error {
	if err := s.bind(args); err != nil {
		return err
	}
	defer s.st.Reset()
	for {
		row, err := s.st.Step()
		if err != nil || !row {
			return err
		}
	}
}

func (s zStmt) QueryRow(args []any, dest ...any) (bool, error) {
	if err := s.bind(args); err != nil {
		return false, err
	}
	defer s.st.Reset()
	row, err := s.st.Step()
	if err != nil || !row {
		return false, err
	}
	return true, s.scan(dest)
}

func (s zStmt) Query(args []any, dest []any, fn func() error) error {
	if err := s.bind(args); err != nil {
		return err
	}
	defer s.st.Reset()
	for {
		row, err := s.st.Step()
		if err != nil || !row {
			return err
		}
		if err := s.scan(dest); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
}

func (s zStmt) Close() error { return nil } // finalized by Conn.Close

// github.com/ncruces/go-sqlite3

type nConn struct{ c *sqlite3.Conn }

func openNcruces(path string) (Conn, error) {
	c, err := sqlite3.Open(path)
	if err != nil {
		return nil, err
	}
	return nConn{c}, nil
}

func (n nConn) Exec(query string) error { return n.c.Exec(query) }

func (n nConn) Prepare(query string) (Stmt, error) {
	st, _, err := n.c.Prepare(query)
	if err != nil {
		return nil, err
	}
	return nStmt{st}, nil
}

func (n nConn) Close() error { return n.c.Close() }

type nStmt struct{ st *sqlite3.Stmt }

func (s nStmt) bind(args []any) error {
	for i, a := range args {
		var err error
		switch v := a.(type) {
		case int64:
			err = s.st.BindInt64(i+1, v)
		case int:
			err = s.st.BindInt64(i+1, int64(v))
		case string:
			err = s.st.BindText(i+1, v)
		case []byte:
			if v == nil {
				err = s.st.BindNull(i + 1)
			} else {
				err = s.st.BindBlob(i+1, v)
			}
		case nil:
			err = s.st.BindNull(i + 1)
		default:
			err = fmt.Errorf("unsupported argument type %T", a)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s nStmt) scan(dest []any) error {
	for i, d := range dest {
		switch p := d.(type) {
		case *int64:
			*p = s.st.ColumnInt64(i)
		case *string:
			*p = s.st.ColumnText(i)
		case *[]byte:
			*p = s.st.ColumnBlob(i, (*p)[:0])
		default:
			return fmt.Errorf("unsupported scan type %T", d)
		}
	}
	return nil
}

func (s nStmt) Exec(args ...any) error {
	if err := s.bind(args); err != nil {
		return err
	}
	return s.st.Exec()
}

func (s nStmt) QueryRow(args []any, dest ...any) (bool, error) {
	if err := s.bind(args); err != nil {
		return false, err
	}
	if !s.st.Step() {
		return false, s.st.Reset()
	}
	err := s.scan(dest)
	if rerr := s.st.Reset(); err == nil {
		err = rerr
	}
	return err == nil, err
}

func (s nStmt) Query(args []any, dest []any, fn func() error) error {
	if err := s.bind(args); err != nil {
		return err
	}
	for s.st.Step() {
		if err := s.scan(dest); err != nil {
			s.st.Reset()
			return err
		}
		if err := fn(); err != nil {
			s.st.Reset()
			return err
		}
	}
	return s.st.Reset()
}

func (s nStmt) Close() error { return s.st.Close() }
