package remotesql

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

type tokenKind int

const (
	tEOF tokenKind = iota
	tSpace
	tWord      // an unquoted word: keyword or identifier
	tQuoted    // a quoted identifier
	tString    // a string literal (or another literal the lexer skips whole)
	tParam     // :name
	tDot       // .
	tSemicolon // ;
	tOther     // numbers, operators, punctuation
)

type token struct {
	kind       tokenKind
	start, end int
	text       string // the source text (for tParam: the name)
	ident      string // tWord, tQuoted: the identifier
}

// lexer splits SQL text into the tokens the checks need. It knows the
// quoting rules of both dialects: '…' strings (a doubled quote escapes
// itself), "…" identifiers, -- and /* */ comments (nested in Postgres), and per
// dialect E'…' strings and $tag$…$tag$ strings (Postgres) or […] and `…`
// identifiers (SQLite).
type lexer struct {
	src string
	pos int
	d   Dialect
}

func isWordStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= utf8.RuneSelf
}

func isWordPart(c byte) bool { return isWordStart(c) || (c >= '0' && c <= '9') || c == '$' }

func (l *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("remotesql: offset %d: %s", l.pos, fmt.Sprintf(format, args...))
}

func (l *lexer) next() (token, error) {
	s, start := l.src, l.pos
	if start >= len(s) {
		return token{kind: tEOF, start: start, end: start}, nil
	}
	c := s[start]
	tok := func(k tokenKind, end int) (token, error) {
		l.pos = end
		return token{kind: k, start: start, end: end, text: s[start:end]}, nil
	}
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		end := start + 1
		for end < len(s) && strings.IndexByte(" \t\n\r\f\v", s[end]) >= 0 {
			end++
		}
		return tok(tSpace, end)
	case c == '-' && strings.HasPrefix(s[start:], "--"):
		end := strings.IndexByte(s[start:], '\n')
		if end < 0 {
			return tok(tSpace, len(s))
		}
		return tok(tSpace, start+end+1)
	case c == '/' && strings.HasPrefix(s[start:], "/*"):
		depth, i := 1, start+2
		for i < len(s) && depth > 0 {
			switch {
			case strings.HasPrefix(s[i:], "*/"):
				depth--
				i += 2
			case l.d == Postgres && strings.HasPrefix(s[i:], "/*"):
				depth++
				i += 2
			default:
				i++
			}
		}
		if depth > 0 {
			return token{}, l.errorf("unterminated comment")
		}
		return tok(tSpace, i)
	case c == '\'':
		end, err := l.quoted(start, '\'', false)
		if err != nil {
			return token{}, err
		}
		return tok(tString, end)
	case c == '"':
		end, err := l.quoted(start, '"', false)
		if err != nil {
			return token{}, err
		}
		t, _ := tok(tQuoted, end)
		t.ident = strings.ReplaceAll(s[start+1:end-1], `""`, `"`)
		return t, nil
	case l.d == SQLite && c == '`':
		end, err := l.quoted(start, '`', false)
		if err != nil {
			return token{}, err
		}
		t, _ := tok(tQuoted, end)
		t.ident = strings.ReplaceAll(s[start+1:end-1], "``", "`")
		return t, nil
	case l.d == SQLite && c == '[':
		i := strings.IndexByte(s[start+1:], ']')
		if i < 0 {
			return token{}, l.errorf("unterminated [identifier]")
		}
		t, _ := tok(tQuoted, start+1+i+1)
		t.ident = s[start+1 : start+1+i]
		return t, nil
	case c == '$' && l.d == Postgres:
		// $n (a positional parameter) or $tag$…$tag$ (a string).
		i := start + 1
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			return token{}, l.errorf("positional parameters ($n) are not allowed: name parameters :name")
		}
		for i < len(s) && isWordPart(s[i]) && s[i] != '$' {
			i++
		}
		if i >= len(s) || s[i] != '$' {
			return token{}, l.errorf("stray '$'")
		}
		delim := s[start : i+1]
		close := strings.Index(s[i+1:], delim)
		if close < 0 {
			return token{}, l.errorf("unterminated dollar-quoted string")
		}
		return tok(tString, i+1+close+len(delim))
	case c == '$' || c == '@' || c == '?':
		if c == '?' && l.d == Postgres {
			return tok(tOther, start+1) // a jsonb operator
		}
		return token{}, l.errorf("parameters are written :name (found %q)", c)
	case c == ':':
		if strings.HasPrefix(s[start:], "::") {
			return tok(tOther, start+2)
		}
		i := start + 1
		if i < len(s) && isWordStart(s[i]) {
			for i < len(s) && isWordPart(s[i]) && s[i] != '$' {
				i++
			}
			l.pos = i
			return token{kind: tParam, start: start, end: i, text: s[start+1 : i]}, nil
		}
		return tok(tOther, start+1)
	case c == '.':
		if start+1 < len(s) && s[start+1] >= '0' && s[start+1] <= '9' {
			return l.number(start)
		}
		return tok(tDot, start+1)
	case c == ';':
		return tok(tSemicolon, start+1)
	case c >= '0' && c <= '9':
		return l.number(start)
	case isWordStart(c):
		i := start + 1
		for i < len(s) && isWordPart(s[i]) {
			i++
		}
		// A prefix glued to a quote is part of a literal: E'…', X'…',
		// B'…', U&'…' and the like.
		if i < len(s) && s[i] == '\'' && i-start <= 2 {
			backslash := l.d == Postgres && strings.EqualFold(s[start:i], "E")
			end, err := l.quoted(i, '\'', backslash)
			if err != nil {
				return token{}, err
			}
			return tok(tString, end)
		}
		t, _ := tok(tWord, i)
		t.ident = s[start:i]
		return t, nil
	}
	_, size := utf8.DecodeRuneInString(s[start:])
	return tok(tOther, start+size)
}

// quoted returns the end of a quoted token opened at start: the quote
// doubled escapes itself; with backslash, a backslash escapes the next
// byte.
func (l *lexer) quoted(start int, q byte, backslash bool) (int, error) {
	s := l.src
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if backslash {
				i++
			}
		case q:
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	return 0, l.errorf("unterminated %c-quoted text", q)
}

// number skips a numeric literal (digits, a point, an exponent, hex
// digits and separators: anything word-like that follows).
func (l *lexer) number(start int) (token, error) {
	s, i := l.src, start
	for i < len(s) && (isWordPart(s[i]) || s[i] == '.' ||
		((s[i] == '+' || s[i] == '-') && i > start && (s[i-1] == 'e' || s[i-1] == 'E'))) {
		i++
	}
	l.pos = i
	return token{kind: tOther, start: start, end: i, text: s[start:i]}, nil
}
