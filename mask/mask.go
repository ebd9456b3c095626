// Package mask hides phone numbers in what operators see and what the logs
// say: a number keeps only its last four digits, and the digit after a
// leading "+" (the start of its country code) when it was written with one —
// "+7 999 123-45-67" becomes "+7***4567", "8 (916) 111-22-33" becomes
// "***2233".
//
// Phone is for a value known to be a phone number. Phones is for free text:
// it masks every phone-like run in it — 10 to 15 digits, an optional leading
// "+", the digits in groups joined by spaces, dashes, dots or parentheses —
// and leaves alone what is plainly something else: a run that is part of a
// word (a UUID, a hash, a bot's "bot123:…" path), a date and time
// ("2026-12-01 09:46:45"), a decimal amount ("12345678.90"), a run of more
// than 15 digits without separators. Where a run could be a phone, it is
// masked: a bare 10-digit Telegram user id in free text reads "***1001".
// Field is for a named value (a JSON key, a log attribute): a name that says
// phone masks it as a phone, a name that says id keeps a plain number (a
// Telegram chat id is an id, not a phone), any other is free text. Number is
// Field for a JSON number. NewHandler applies Field to every record of a
// slog handler.
package mask

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// minDigits and maxDigits bound a phone-like run: E.164 numbers have at
	// most 15 digits, and national ones without the country code 10.
	minDigits = 10
	maxDigits = 15
	// minPhoneDigits is the fewest digits a value known to be a phone must
	// have to keep its last four; shorter ones are masked whole.
	minPhoneDigits = 7
	// maxGap is the most separator characters between two digit groups
	// ("8 (916) 111": " (" and ") ").
	maxGap = 3
	keep   = 4 // the last digits a masked number shows
	stars  = "***"
)

// Phone masks a value known to be a phone number: "+7***4567" when it starts
// with "+", "***4567" when it does not, "***" when it has fewer than seven
// digits. A value without digits ("", "n/a") and a value Phone already
// masked come back as they are.
func Phone(s string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	if isMasked(s) {
		return s
	}
	var digits []byte
	plus := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c):
			digits = append(digits, c)
		case c == '+' && len(digits) == 0:
			plus = true
		}
	}
	switch {
	case len(digits) == 0:
		return s // no number at all ("n/a", a country code name)
	case len(digits) < minPhoneDigits:
		return stars
	}
	return masked(plus, digits[0], digits[len(digits)-keep:])
}

// masked is the masked form of a number.
func masked(plus bool, first byte, last []byte) string {
	var b strings.Builder
	if plus {
		b.WriteByte('+')
		b.WriteByte(first)
	}
	b.WriteString(stars)
	b.Write(last)
	return b.String()
}

// isMasked reports whether s is a masked number: "+7***1234", "***1234", "***".
func isMasked(s string) bool {
	if len(s) >= 2 && s[0] == '+' && isDigit(s[1]) {
		s = s[2:]
	}
	rest, ok := strings.CutPrefix(s, stars)
	if !ok || len(rest) > keep {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if !isDigit(rest[i]) {
			return false
		}
	}
	return true
}

// Phones masks every phone-like run in free text (see the package comment)
// and leaves the rest of the text as it is.
func Phones(s string) string {
	if countDigits(s) < minDigits {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is written to b
	for i := 0; i < len(s); {
		if !startsRun(s, i) {
			i++
			continue
		}
		r := readRun(s, i)
		if r.isPhone(s) {
			b.WriteString(s[done:r.start])
			b.WriteString(masked(r.plus, r.first, r.last[:]))
			done = r.end
		}
		i = r.end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// run is a phone-like stretch of text: s[start:end], from its "+", its
// opening parenthesis or its first digit to its last digit.
type run struct {
	start, end int
	plus       bool
	digits     int
	first      byte
	last       [keep]byte // the last digits, right-aligned
	groups     []int      // the length of each digit group
	dots       int        // "." between groups
	otherSeps  int        // any other separator character between groups
	dashesOnly bool       // every gap is a single "-"
}

// startsRun reports whether a run may start at s[i]: a digit that does not
// follow another, a "+" before a digit or "(", or "(" before a digit.
func startsRun(s string, i int) bool {
	next := func(j int) byte {
		if j < len(s) {
			return s[j]
		}
		return 0
	}
	switch c := s[i]; {
	case isDigit(c):
		return i == 0 || !isDigit(s[i-1])
	case c == '+':
		return isDigit(next(i+1)) || (next(i+1) == '(' && isDigit(next(i+2)))
	case c == '(':
		return isDigit(next(i + 1))
	}
	return false
}

// readRun reads the run that starts at s[i] (startsRun holds).
func readRun(s string, i int) run {
	r := run{start: i, dashesOnly: true}
	j := i
	if s[j] == '+' {
		r.plus = true
		j++
	}
	parenAt := -1
	if s[j] == '(' {
		parenAt = j
		j++
	}
	closed := false
	for {
		k := j
		for k < len(s) && isDigit(s[k]) {
			r.add(s[k])
			k++
		}
		r.groups = append(r.groups, k-j)
		r.end = k
		// A short gap of separators followed by a digit continues the run.
		g, n, dots, other, dash, closing := k, 0, 0, 0, 0, false
		for g < len(s) && n < maxGap {
			c, size := utf8.DecodeRuneInString(s[g:])
			if !isSeparator(c) {
				break
			}
			switch c {
			case '.':
				dots++
			case '-':
				dash++
				other++
			case ')':
				closing = true
				other++
			default:
				other++
			}
			g += size
			n++
		}
		if n == 0 || g >= len(s) || !isDigit(s[g]) {
			break
		}
		r.dots += dots
		r.otherSeps += other
		closed = closed || closing
		if !(n == 1 && dash == 1) {
			r.dashesOnly = false
		}
		j = g
	}
	if parenAt >= 0 && !closed && !r.plus {
		// "(89161112244)": the parenthesis is the text's, not the number's.
		r.start = parenAt + 1
	}
	return r
}

func (r *run) add(d byte) {
	if r.digits == 0 {
		r.first = d
	}
	r.digits++
	copy(r.last[:], r.last[1:])
	r.last[keep-1] = d
}

// isPhone decides whether the run is a phone number to mask, looking at the
// text around it.
func (r *run) isPhone(s string) bool {
	separated := r.dots+r.otherSeps > 0
	switch {
	case r.digits < minDigits:
		return false
	case r.digits > maxDigits && !separated:
		return false // a long number (a snowflake id, nanoseconds), not a phone
	case r.digits > maxDigits && r.isUUID():
		return false
	case r.dots == 1 && r.otherSeps == 0 && !r.plus:
		return false // a decimal amount: 12345678.90
	}
	before, _ := utf8.DecodeLastRuneInString(s[:r.start])
	if isWord(before) {
		return false // part of a word: a hash, a UUID's group, "bot123…"
	}
	if before == '-' || before == '_' {
		if b2, _ := utf8.DecodeLastRuneInString(s[:r.start-1]); isWord(b2) || unicode.IsDigit(b2) {
			return false // a group of a compound id: "a716-446655440000"
		}
	}
	after, size := utf8.DecodeRuneInString(s[r.end:])
	switch {
	case isWord(after):
		return false // "…0000a", "2026-12-01T09"
	case after == ':' && r.end+size < len(s) && isDigit(s[r.end+size]):
		return false // a time follows: "2026-12-01 09:46"
	case (after == '-' || after == '_') && r.end+size < len(s):
		if a2, _ := utf8.DecodeRuneInString(s[r.end+size:]); isWord(a2) {
			return false
		}
	}
	if !r.plus && !separated && idBefore(s[:r.start]) {
		return false // "chat_id":5550001001, user_id=5550001001
	}
	return true
}

// isUUID reports whether the run is an all-digit UUID (8-4-4-4-12).
func (r *run) isUUID() bool {
	want := []int{8, 4, 4, 4, 12}
	if !r.dashesOnly || len(r.groups) != len(want) {
		return false
	}
	for i, n := range want {
		if r.groups[i] != n {
			return false
		}
	}
	return true
}

// idBefore reports whether text ends with a key that names an id and the
// ":" or "=" that gives it a value: `"chat_id": `, `"telegramId":"`, `uid=`.
func idBefore(text string) bool {
	t := strings.TrimRight(text, `"' `)
	if t == "" || (t[len(t)-1] != ':' && t[len(t)-1] != '=') {
		return false
	}
	t = strings.TrimRight(t[:len(t)-1], `"' `)
	k := len(t)
	for k > 0 && (isKeyByte(t[k-1])) {
		k--
	}
	return IsIDKey(t[k:])
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// IsIDKey reports whether a key names an id (or a list of them): "id",
// "uid", "chat_id", "telegramId", "UserId", "processedIds" — but not one
// that names a phone.
func IsIDKey(k string) bool {
	if isPhoneKey(k) {
		return false
	}
	l := strings.ToLower(k)
	switch l {
	case "id", "ids", "uid", "uids":
		return true
	}
	for _, suffix := range []string{"_id", "_ids", "-id", "-ids", ".id"} {
		if strings.HasSuffix(l, suffix) {
			return true
		}
	}
	for _, suffix := range []string{"Id", "ID", "Ids", "IDs"} {
		if len(k) > len(suffix) && strings.HasSuffix(k, suffix) {
			return true
		}
	}
	return false
}

// isPhoneKey reports whether a key names a phone number.
func isPhoneKey(k string) bool {
	l := strings.ToLower(k)
	return strings.Contains(l, "phone") || strings.Contains(l, "msisdn")
}

// Field masks a named value: a phone-named key ("phone", "PhoneNumber") as a
// Phone; an id-named key (IsIDKey) with a plain number as it is; anything
// else as free text (Phones).
func Field(key, value string) string {
	switch {
	case isPhoneKey(key):
		return Phone(value)
	case IsIDKey(key) && plainNumber(value):
		return value
	}
	return Phones(value)
}

// Number masks a JSON number under key. Numbers are ids, counts and times,
// so one is masked only under a phone-named key, or when it has 11 to 15
// digits under a key that names no id: a phone written as a number carries
// its country or trunk digit in front ("89161112244"), while a 10-digit
// number is most often a Unix time in seconds (Telegram's "date").
func Number(key, n string) string {
	switch {
	case isPhoneKey(key):
		return Phone(n)
	case IsIDKey(key) || !plainNumber(n):
		return n
	}
	if d := len(strings.TrimPrefix(n, "-")); d > minDigits && d <= maxDigits {
		return masked(false, 0, []byte(n[len(n)-keep:]))
	}
	return n
}

// plainNumber reports whether s is digits only, with an optional minus.
func plainNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func countDigits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if isDigit(s[i]) {
			n++
		}
	}
	return n
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isWord is a letter or an underscore: what makes a run of digits part of a
// word. utf8.RuneError (no rune: the text's start or end) is not.
func isWord(r rune) bool { return r == '_' || (r != utf8.RuneError && unicode.IsLetter(r)) }

// isSeparator is a character that may join a phone number's digit groups.
func isSeparator(r rune) bool {
	switch r {
	case ' ', '-', '.', '(', ')',
		'\u00a0', // no-break space
		'\u2011', // non-breaking hyphen
		'\u2013', // en dash
		'\u202f': // narrow no-break space
		return true
	}
	return false
}
