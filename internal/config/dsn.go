package config

import (
	"errors"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
)

// kvKey matches a libpq key=value connection string by one of its
// common keys.
var kvKey = regexp.MustCompile(`(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|sslmode|service|connect_timeout|application_name|target_session_attrs)\s*=`)

// IsPostgres reports whether db names a Postgres database: a postgres://
// or postgresql:// URL, or a key=value DSN ("host=… dbname=…"). Anything
// else is an SQLite file path.
func IsPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") || kvKey.MatchString(db)
}

const redacted = "xxxxx"

// kvPassword matches the password of a key=value DSN, quoted or not.
// An unterminated quote runs to the end, and what follows a closing
// quote up to the next space is taken with the value.
var kvPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*(?:'\S*|\\?$)|[^\s']\S*)`)

// RedactDSN hides the password of a Postgres DSN (in a URL's user info
// or query, or a key=value DSN); an SQLite path is returned as is.
func RedactDSN(db string) string {
	if !IsPostgres(db) {
		return db
	}
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		u, err := url.Parse(db)
		if err != nil {
			return "postgres://" + redacted // unparsable: show nothing of it
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(db, "${1}"+redacted)
}

// urlPassword matches the password of a URL's user info ("//user:pass@",
// or "user:pass@" at the start of a bare host), up to the last "@" before
// a space: a password with "/" or "@" in it is hidden whole.
var urlPassword = regexp.MustCompile(`(//[^/@\s:]*:)\S*@`)
var barePassword = regexp.MustCompile(`^([^/@\s:]*:)\S*@`)

// RedactURL hides the password of a URL's user info, for an error that
// names a refused URL setting.
func RedactURL(s string) string {
	re := urlPassword
	if !strings.Contains(s, "//") {
		re = barePassword
	}
	return re.ReplaceAllString(s, "${1}"+redacted+"@")
}

// userInfoPassword returns the password of a URL's user info, if any.
func userInfoPassword(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// DSNPassword returns the password a Postgres DSN carries, if any.
func DSNPassword(db string) string {
	if !IsPostgres(db) {
		return ""
	}
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		u, err := url.Parse(db)
		if err != nil {
			return ""
		}
		if p, ok := u.User.Password(); ok {
			return p
		}
		return u.Query().Get("password")
	}
	m := kvPassword.FindStringSubmatch(db)
	if m == nil {
		return ""
	}
	p := m[2]
	if strings.HasPrefix(p, "'") {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "'"), "'")
		p = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(p)
	}
	return p
}

// WithPassword sets password into a Postgres DSN that carries none.
func WithPassword(db, password string) (string, error) {
	if DSNPassword(db) != "" {
		return db, nil
	}
	if strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://") {
		u, err := url.Parse(db)
		if err != nil {
			return "", errors.New("db: not a valid URL")
		}
		user := ""
		if u.User != nil {
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, password)
		return u.String(), nil
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
	return db + " password='" + quoted + "'", nil
}

// Secrets lists the secret values of c that output must never show:
// the database passwords, the HS256 secret, the object store's key,
// the webhooks' secrets (previous ones too) and headers (read from their
// files when set by file; unreadable files give nothing here).
func (c Config) Secrets() []string {
	var out []string
	add := func(s string) {
		if len(s) >= 4 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(DSNPassword(c.DB))
	add(DSNPassword(c.DBListen))
	add(c.Auth.HS256Secret)
	add(c.Blobs.S3.SecretAccessKey)
	for _, u := range []string{c.Auth.JWKSURL, c.Blobs.S3.Endpoint, c.SignedURLs.PublicURL, c.Tracing.Endpoint} {
		add(userInfoPassword(u))
	}
	files := []string{c.DBPasswordFile, c.Auth.HS256SecretFile, c.Blobs.S3.SecretAccessKeyFile}
	for _, h := range c.Webhooks {
		add(h.Secret)
		for _, s := range h.PreviousSecrets {
			add(s)
		}
		for _, v := range h.Headers {
			add(v)
		}
		files = append(files, h.SecretFile)
		files = append(files, h.PreviousSecretFiles...)
	}
	for _, f := range files {
		if f != "" {
			if b, err := os.ReadFile(f); err == nil {
				add(strings.TrimRight(string(b), "\r\n"))
			}
		}
	}
	return out
}

// RedactingWriter writes to w with every secret replaced by xxxxx: the
// last guard of the process's output (each Write is one log record or
// line).
type RedactingWriter struct {
	w       io.Writer
	replace *strings.Replacer
}

// NewRedactingWriter returns a writer hiding secrets.
func NewRedactingWriter(w io.Writer, secrets []string) io.Writer {
	if len(secrets) == 0 {
		return w
	}
	var pairs []string
	for _, s := range secrets {
		pairs = append(pairs, s, redacted)
	}
	return &RedactingWriter{w: w, replace: strings.NewReplacer(pairs...)}
}

func (r *RedactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.replace.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
