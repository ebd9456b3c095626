package store

import (
	"strconv"
	"strings"
)

// Rebind turns the ? placeholders of query into PostgreSQL's $1, $2, … in
// order, leaving alone any ? inside a string literal ('…'), a quoted
// identifier ("…"), a dollar-quoted string ($tag$…$tag$) or a comment. The
// domain packages write one SQL text with ? placeholders; the PostgreSQL
// connections rebind it as they prepare or run it, so the text is never
// forked per dialect. A query without ? comes back unchanged.
func Rebind(query string) string {
	if !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			i++
			continue
		case c == '\'' || c == '"':
			end := quotedEnd(query, i, c)
			b.WriteString(query[i:end])
			i = end
			continue
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			b.WriteString(query[i : i+end])
			i += end
			continue
		case c == '/' && strings.HasPrefix(query[i:], "/*"):
			end := strings.Index(query[i+2:], "*/")
			if end < 0 {
				end = len(query) - i
			} else {
				end += 4
			}
			b.WriteString(query[i : i+end])
			i += end
			continue
		case c == '$':
			if tag, ok := dollarTag(query[i:]); ok {
				end := strings.Index(query[i+len(tag):], tag)
				if end < 0 {
					end = len(query) - i
				} else {
					end += 2 * len(tag)
				}
				b.WriteString(query[i : i+end])
				i += end
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// quotedEnd returns the index just past the literal opened by quote at i; a
// doubled quote inside it is an escaped one.
func quotedEnd(s string, i int, quote byte) int {
	for j := i + 1; j < len(s); j++ {
		if s[j] != quote {
			continue
		}
		if j+1 < len(s) && s[j+1] == quote {
			j++
			continue
		}
		return j + 1
	}
	return len(s)
}

// dollarTag reports the opening tag of a dollar-quoted string at the start
// of s ($$ or $name$), not a positional parameter such as $1.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && j > 1:
		default:
			return "", false
		}
	}
	return "", false
}
