package sqlitechoice

import (
	"context"
	"database/sql"
	"errors"
)

// SQLConn adapts one database/sql connection (a *sql.Conn pinned from a pool
// of one) to Conn. Statements are prepared on that connection, so they are
// never re-prepared.
type SQLConn struct {
	db *sql.DB
	c  *sql.Conn
}

// OpenSQL opens dsn with a registered database/sql driver.
func OpenSQL(driverName, dsn string) (Conn, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	return NewSQLConn(db)
}

// NewSQLConn pins one connection of db.
func NewSQLConn(db *sql.DB) (Conn, error) {
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c, err := db.Conn(context.Background())
	if err != nil {
		db.Close()
		return nil, err
	}
	return &SQLConn{db: db, c: c}, nil
}

// Exec implements Conn.
func (s *SQLConn) Exec(query string) error {
	_, err := s.c.ExecContext(context.Background(), query)
	return err
}

// Prepare implements Conn.
func (s *SQLConn) Prepare(query string) (Stmt, error) {
	st, err := s.c.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	return sqlStmt{st}, nil
}

// Close implements Conn.
func (s *SQLConn) Close() error {
	err := s.c.Close()
	if err2 := s.db.Close(); err == nil {
		err = err2
	}
	return err
}

type sqlStmt struct{ st *sql.Stmt }

func (s sqlStmt) Exec(args ...any) error {
	_, err := s.st.Exec(args...)
	return err
}

func (s sqlStmt) QueryRow(args []any, dest ...any) (bool, error) {
	err := s.st.QueryRow(args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (s sqlStmt) Query(args []any, dest []any, fn func() error) error {
	rows, err := s.st.Query(args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (s sqlStmt) Close() error { return s.st.Close() }
