package fakebot

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mymmrac/telego"
)

// This file turns a message's text and parse_mode into the text and
// entities Telegram stores, the way the Bot API does it (its parser is
// TDLib's: parse_html, parse_markdown_v2, parse_markdown and
// fix_formatted_text in td/telegram/MessageEntity.cpp). Offsets and lengths
// count UTF-16 code units; errors name byte offsets in the text as sent,
// with Telegram's own wording, e.g. `Unsupported start tag "br" at byte
// offset 5`.

// entityKind is an entity type as the parser knows it.
type entityKind int

const (
	kindMention entityKind = iota
	kindHashtag
	kindCashtag
	kindBotCommand
	kindURL
	kindBold
	kindItalic
	kindUnderline
	kindStrikethrough
	kindSpoiler
	kindCode
	kindPre
	kindPreCode
	kindTextURL
	kindMentionName
	kindCustomEmoji
	kindBlockquote
	kindExpandableBlockquote
)

// kindInfo is what the Bot API calls an entity kind, how TDLib names it in
// its errors, and its sort priority when two entities cover the same text.
var kindInfo = map[entityKind]struct {
	api      string
	name     string
	priority int
}{
	kindMention:              {telego.EntityTypeMention, "Mention", 50},
	kindHashtag:              {telego.EntityTypeHashtag, "Hashtag", 50},
	kindCashtag:              {telego.EntityTypeCashtag, "Cashtag", 50},
	kindBotCommand:           {telego.EntityTypeBotCommand, "BotCommand", 50},
	kindURL:                  {telego.EntityTypeURL, "Url", 50},
	kindBold:                 {telego.EntityTypeBold, "Bold", 90},
	kindItalic:               {telego.EntityTypeItalic, "Italic", 91},
	kindUnderline:            {telego.EntityTypeUnderline, "Underline", 92},
	kindStrikethrough:        {telego.EntityTypeStrikethrough, "Strikethrough", 93},
	kindSpoiler:              {telego.EntityTypeSpoiler, "Spoiler", 94},
	kindCode:                 {telego.EntityTypeCode, "Code", 20},
	kindPre:                  {telego.EntityTypePre, "Pre", 11},
	kindPreCode:              {telego.EntityTypePre, "PreCode", 10},
	kindTextURL:              {telego.EntityTypeTextLink, "TextUrl", 49},
	kindMentionName:          {telego.EntityTypeTextMention, "MentionName", 49},
	kindCustomEmoji:          {telego.EntityTypeCustomEmoji, "CustomEmoji", 99},
	kindBlockquote:           {telego.EntityTypeBlockquote, "BlockQuote", 0},
	kindExpandableBlockquote: {telego.EntityTypeExpandableBlockquote, "ExpandableBlockQuote", 0},
}

// splittable entities may be cut in pieces and merged with their
// neighbours; the others keep their bounds.
func (k entityKind) splittable() bool {
	return k == kindBold || k == kindItalic || k == kindUnderline || k == kindStrikethrough || k == kindSpoiler
}

func (k entityKind) blockquote() bool { return k == kindBlockquote || k == kindExpandableBlockquote }

// code entities hold no other entity.
func (k entityKind) code() bool { return k == kindCode || k == kindPre || k == kindPreCode }

// splitIndex orders the splittable kinds as TDLib flushes them.
func (k entityKind) splitIndex() int {
	return map[entityKind]int{kindBold: 0, kindItalic: 1, kindUnderline: 2, kindStrikethrough: 3, kindSpoiler: 4}[k]
}

var splitOrder = []entityKind{kindBold, kindItalic, kindUnderline, kindStrikethrough, kindSpoiler}

// entity is one entity while a text is formatted.
type entity struct {
	kind           entityKind
	offset, length int    // UTF-16 code units
	arg            string // text_link URL, pre language, custom emoji id
	userID         int64  // text_mention
}

func (e entity) end() int { return e.offset + e.length }

// sortEntities orders entities as Telegram returns them: by offset, the
// longer first, then by kind priority.
func sortEntities(es []entity) {
	slices.SortStableFunc(es, func(a, b entity) int {
		if a.offset != b.offset {
			return a.offset - b.offset
		}
		if a.length != b.length {
			return b.length - a.length
		}
		return kindInfo[a.kind].priority - kindInfo[b.kind].priority
	})
}

// formatError is a parse failure, in TDLib's words.
type formatError string

func errorf(format string, args ...any) formatError { return formatError(fmt.Sprintf(format, args...)) }

// utf16Units is how many UTF-16 code units the character starting with byte
// c counts for: none for a continuation byte, two for a four-byte sequence.
func utf16Units(c byte) int {
	switch {
	case c&0xc0 == 0x80:
		return 0
	case c >= 0xf0:
		return 2
	}
	return 1
}

func utf16Len(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n += utf16Units(s[i])
	}
	return n
}

// byteAt returns s[i], or 0 past the end, as TDLib reads its NUL-terminated
// strings.
func byteAt(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0 || c == '\v'
}

func isAlnumByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// parseHTML is the Bot API's HTML parse mode.
func parseHTML(src string, users userLookup) (string, []entity, formatError) {
	var out strings.Builder
	var ents []entity
	u16 := 0
	type open struct {
		tag, arg string
		offset   int // UTF-16
		begin    int // byte offset in out
	}
	var stack []open
	badSurrogate := false
	at := func(i int) byte { return byteAt(src, i) }

	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '&' {
			if code, next := decodeHTMLEntity(src, i); code != 0 {
				if code >= 0xd800 && code <= 0xdbff {
					// Half a pair: whole only if the other half follows.
					if low, after := decodeHTMLEntity(src, next); low >= 0xdc00 && low <= 0xdfff {
						code, next = 0x10000+(code-0xd800)<<10+(low-0xdc00), after
					}
				}
				if code >= 0xd800 && code <= 0xdfff {
					badSurrogate = true
				} else {
					out.WriteRune(rune(code))
				}
				if code > 0xffff {
					u16 += 2
				} else {
					u16++
				}
				i = next - 1
				continue
			}
		}
		if c != '<' {
			u16 += utf16Units(c)
			out.WriteByte(c)
			continue
		}

		begin := i
		i++
		if at(i) != '/' {
			for !isSpaceByte(at(i)) && at(i) != '>' {
				i++
			}
			if at(i) == 0 {
				return "", nil, errorf("Unclosed start tag at byte offset %d", begin)
			}
			tag := asciiLower(src[begin+1 : i])
			switch tag {
			case "a", "b", "strong", "i", "em", "s", "strike", "del", "u", "ins", "tg-spoiler", "tg-emoji",
				"span", "pre", "code", "blockquote":
			default:
				return "", nil, errorf("Unsupported start tag %q at byte offset %d", tag, begin)
			}
			arg := ""
			for at(i) != '>' {
				for at(i) != 0 && isSpaceByte(at(i)) {
					i++
				}
				if at(i) == '>' {
					break
				}
				nameBegin := i
				for c := at(i); !isSpaceByte(c) && c != '=' && c != '>' && c != '/' && c != '"' && c != '\''; c = at(i) {
					i++
				}
				name := src[nameBegin:i]
				if name == "" {
					return "", nil, errorf("Empty attribute name in the tag %q at byte offset %d", tag, begin)
				}
				for at(i) != 0 && isSpaceByte(at(i)) {
					i++
				}
				if at(i) != '=' {
					if at(i) == 0 {
						return "", nil, errorf("Unclosed start tag %q at byte offset %d", tag, begin)
					}
					if tag == "blockquote" && name == "expandable" {
						arg = "1"
					}
					continue
				}
				i++
				for at(i) != 0 && isSpaceByte(at(i)) {
					i++
				}
				if at(i) == 0 {
					return "", nil, errorf("Unclosed start tag %q at byte offset %d", tag, begin)
				}
				var value string
				if q := at(i); q != '\'' && q != '"' {
					// A name token: letters, digits, periods and hyphens,
					// not case-sensitive.
					tokenBegin := i
					for c := at(i); isAlnumByte(c) || c == '.' || c == '-'; c = at(i) {
						i++
					}
					value = asciiLower(src[tokenBegin:i])
					if !isSpaceByte(at(i)) && at(i) != '>' {
						return "", nil, errorf("Unexpected end of name token at byte offset %d", tokenBegin)
					}
				} else {
					i++
					var v strings.Builder
					for at(i) != q && at(i) != 0 {
						if at(i) == '&' {
							if code, next := decodeHTMLEntity(src, i); code != 0 {
								v.WriteRune(rune(code))
								i = next
								continue
							}
						}
						v.WriteByte(at(i))
						i++
					}
					if at(i) == q {
						i++
					}
					value = v.String()
				}
				if at(i) == 0 {
					return "", nil, errorf("Unclosed start tag at byte offset %d", begin)
				}
				switch {
				case tag == "a" && name == "href":
					arg = value
				case tag == "code" && name == "class" && strings.HasPrefix(value, "language-"):
					arg = value[len("language-"):]
				case tag == "span" && name == "class" && strings.HasPrefix(value, "tg-"):
					arg = value[len("tg-"):]
				case tag == "tg-emoji" && name == "emoji-id":
					arg = value
				case tag == "blockquote" && name == "expandable":
					arg = "1"
				}
			}
			if tag == "span" && arg != "spoiler" {
				return "", nil, errorf(`Tag "span" must have class "tg-spoiler" at byte offset %d`, begin)
			}
			stack = append(stack, open{tag: tag, arg: arg, offset: u16, begin: out.Len()})
			continue
		}

		// An end tag.
		if len(stack) == 0 {
			return "", nil, errorf("Unexpected end tag at byte offset %d", begin)
		}
		for !isSpaceByte(at(i)) && at(i) != '>' {
			i++
		}
		endTag := asciiLower(src[begin+2 : i])
		for isSpaceByte(at(i)) && at(i) != 0 {
			i++
		}
		if at(i) != '>' {
			return "", nil, errorf("Unclosed end tag at byte offset %d", begin)
		}
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if endTag != "" && endTag != top.tag {
			return "", nil, errorf(`Unmatched end tag at byte offset %d, expected "</%s>", found "</%s>"`, begin, top.tag, endTag)
		}
		if u16 <= top.offset {
			continue // an empty element makes no entity
		}
		e := entity{offset: top.offset, length: u16 - top.offset}
		last := func() *entity {
			if len(ents) > 0 && ents[len(ents)-1].offset == e.offset && ents[len(ents)-1].length == e.length {
				return &ents[len(ents)-1]
			}
			return nil
		}
		switch top.tag {
		case "i", "em":
			e.kind = kindItalic
		case "b", "strong":
			e.kind = kindBold
		case "s", "strike", "del":
			e.kind = kindStrikethrough
		case "u", "ins":
			e.kind = kindUnderline
		case "tg-spoiler", "span":
			e.kind = kindSpoiler
		case "tg-emoji":
			id, err := strconv.ParseInt(top.arg, 10, 64)
			if err != nil || id == 0 {
				return "", nil, "Invalid custom emoji identifier specified"
			}
			e.kind, e.arg = kindCustomEmoji, strconv.FormatInt(id, 10)
		case "a":
			url := top.arg
			if url == "" {
				url = out.String()[top.begin:]
			}
			var ok bool
			if e, ok = linkEntity(e, url, users); !ok {
				continue
			}
		case "pre":
			if l := last(); l != nil && l.kind == kindCode && l.arg != "" {
				l.kind = kindPreCode
				continue
			}
			e.kind = kindPre
		case "code":
			if l := last(); l != nil && l.kind == kindPre && top.arg != "" {
				l.kind, l.arg = kindPreCode, top.arg
				continue
			}
			e.kind, e.arg = kindCode, top.arg
		case "blockquote":
			e.kind = kindBlockquote
			if top.arg != "" {
				e.kind = kindExpandableBlockquote
			}
		}
		ents = append(ents, e)
	}
	if len(stack) > 0 {
		return "", nil, errorf("Can't find end tag corresponding to start tag %q", stack[len(stack)-1].tag)
	}
	for i := range ents {
		if ents[i].kind == kindCode {
			ents[i].arg = "" // a language outside <pre> is dropped
		}
	}
	if badSurrogate {
		return "", nil, "Text contains invalid Unicode characters after decoding HTML entities, check for unmatched surrogate code units"
	}
	sortEntities(ents)
	return out.String(), ents, ""
}

// decodeHTMLEntity decodes the character reference at src[pos] ('&'):
// &lt; &gt; &amp; &quot; and numeric ones, the only ones Telegram knows. It
// returns the code point and where the text goes on, or 0 when there is no
// reference Telegram would decode (the '&' is then kept as it is).
func decodeHTMLEntity(src string, pos int) (uint32, int) {
	at := func(i int) byte { return byteAt(src, i) }
	if at(pos) != '&' {
		return 0, pos
	}
	end := pos + 1
	var code uint64
	if at(pos+1) == '#' {
		end++
		if at(pos+2) == 'x' {
			end++
			for {
				c := at(end)
				d, ok := hexDigit(c)
				if !ok {
					break
				}
				code = min(code*16+uint64(d), 1<<40)
				end++
			}
		} else {
			for c := at(end); c >= '0' && c <= '9'; c = at(end) {
				code = min(code*10+uint64(c-'0'), 1<<40)
				end++
			}
		}
		if code == 0 || code >= 0x10ffff || end-pos >= 10 {
			return 0, pos
		}
	} else {
		for c := at(end); c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'; c = at(end) {
			end++
		}
		switch src[pos+1 : end] {
		case "lt":
			code = '<'
		case "gt":
			code = '>'
		case "amp":
			code = '&'
		case "quot":
			code = '"'
		default:
			return 0, pos
		}
	}
	if at(end) == ';' {
		end++
	}
	return uint32(code), end
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseMarkdownV2 is the Bot API's MarkdownV2 parse mode.
func parseMarkdownV2(src string, users userLookup) (string, []entity, formatError) {
	var out []byte
	var ents []entity
	u16 := 0
	type open struct {
		kind       entityKind
		arg        string
		offset     int // UTF-16
		byteOffset int // in src, for errors
		begin      int // in out
	}
	var stack []open
	haveQuote, canStartQuote := false, true
	at := func(i int) byte { return byteAt(src, i) }
	reserved := func(c byte) bool {
		if len(stack) > 0 && stack[len(stack)-1].kind.code() {
			return c == '`'
		}
		return strings.IndexByte("_*[]()~`>#+-=|{}.!\n", c) >= 0
	}
	mustEscape := func(c byte) formatError {
		return errorf("Character '%c' is reserved and must be escaped with the preceding '\\'", c)
	}

	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '\\' && at(i+1) > 0 && at(i+1) <= 126 {
			i++
			u16++
			out = append(out, src[i])
			if src[i] != '\r' {
				canStartQuote = src[i] == '\n'
			}
			continue
		}
		if !reserved(c) {
			if n := utf16Units(c); n > 0 {
				u16 += n
				if c != '\r' {
					canStartQuote = false
				}
			}
			out = append(out, c)
			continue
		}

		isEnd := false
		if len(stack) > 0 {
			top := stack[len(stack)-1]
			switch {
			case haveQuote && c == '\n' && (i+1 == len(src) || src[i+1] != '>'):
				isEnd = true
			case top.kind == kindBold:
				isEnd = c == '*'
			case top.kind == kindItalic:
				isEnd = c == '_' && at(i+1) != '_'
			case top.kind == kindCode:
				isEnd = c == '`'
			case top.kind == kindPre, top.kind == kindPreCode:
				isEnd = c == '`' && at(i+1) == '`' && at(i+2) == '`'
			case top.kind == kindTextURL, top.kind == kindCustomEmoji:
				isEnd = c == ']'
			case top.kind == kindUnderline:
				isEnd = c == '_' && at(i+1) == '_'
			case top.kind == kindStrikethrough:
				isEnd = c == '~'
			case top.kind == kindSpoiler:
				isEnd = c == '|' && at(i+1) == '|'
			}
		}

		if !isEnd {
			// The beginning of an entity.
			var kind entityKind
			arg := ""
			byteOffset := i
			skip := false
			switch c {
			case '_':
				kind = kindItalic
				if at(i+1) == '_' {
					kind = kindUnderline
					i++
				}
			case '*':
				kind = kindBold
			case '~':
				kind = kindStrikethrough
			case '|':
				if at(i+1) != '|' {
					return "", nil, mustEscape(c)
				}
				i++
				kind = kindSpoiler
			case '[':
				kind = kindTextURL
			case '`':
				if at(i+1) == '`' && at(i+2) == '`' {
					i += 3
					kind = kindPre
					langEnd := i
					for !isSpaceByte(at(langEnd)) && at(langEnd) != '`' {
						langEnd++
					}
					if i != langEnd && langEnd < len(src) && at(langEnd) != '`' {
						kind, arg = kindPreCode, src[i:langEnd]
						i = langEnd
					}
					// One new line after the opening fence is not text.
					if at(i) == '\n' || at(i) == '\r' {
						if (at(i+1) == '\n' || at(i+1) == '\r') && at(i) != at(i+1) {
							i += 2
						} else {
							i++
						}
					}
					i--
				} else {
					kind = kindCode
				}
			case '!':
				if at(i+1) != '[' {
					return "", nil, mustEscape(c)
				}
				i++
				kind = kindCustomEmoji
			case '\n':
				u16++
				out = append(out, '\n')
				canStartQuote = true
				skip = true
			case '>':
				if !canStartQuote {
					return "", nil, mustEscape(c)
				}
				if haveQuote {
					skip = true // the '>' that continues a quotation
				} else {
					kind, haveQuote = kindBlockquote, true
				}
			default:
				return "", nil, mustEscape(c)
			}
			if !skip {
				stack = append(stack, open{kind: kind, arg: arg, offset: u16, byteOffset: byteOffset, begin: len(out)})
			}
			continue
		}

		// The end of an entity.
		top := stack[len(stack)-1]
		kind := top.kind
		if c == '\n' && kind != kindBlockquote {
			// Only "||" right before the quotation's last new line may be
			// open here: the mark of an expandable quotation.
			mark := kind == kindSpoiler && (top.byteOffset == i-2 ||
				top.byteOffset == i-3 && len(out) > 0 && out[len(out)-1] == '\r')
			if !mark {
				return "", nil, errorf("Can't find end of %s entity at byte offset %d", kindInfo[kind].name, top.byteOffset)
			}
			stack = stack[:len(stack)-1]
			top = stack[len(stack)-1]
			if top.kind != kindBlockquote {
				return "", nil, errorf("Can't find end of %s entity at byte offset %d", kindInfo[top.kind].name, top.byteOffset)
			}
			kind = kindExpandableBlockquote
		}
		arg := top.arg
		var userID int64
		skip := u16 == top.offset
		switch kind {
		case kindUnderline, kindSpoiler:
			i++
		case kindPre, kindPreCode:
			i += 2
		case kindTextURL:
			var url string
			if at(i+1) != '(' {
				url = string(out[top.begin:])
			} else {
				i += 2
				urlBegin := i
				url, i = markdownV2Target(src, i)
				if at(i) != ')' {
					return "", nil, errorf("Can't find end of a URL at byte offset %d", urlBegin)
				}
			}
			if id, ok := linkUserID(url); ok {
				userID = id
				if _, known := users(id); !known {
					skip = true
				}
			} else if checked, ok := checkLink(url); ok {
				arg = checked
			} else {
				skip = true
			}
		case kindCustomEmoji:
			if at(i+1) != '(' {
				return "", nil, "Custom emoji entity must contain a tg://emoji URL"
			}
			i += 2
			urlBegin := i
			target, end := markdownV2Target(src, i)
			i = end
			if at(i) != ')' {
				return "", nil, errorf("Can't find end of a custom emoji URL at byte offset %d", urlBegin)
			}
			id, err := customEmojiID(target)
			if err != "" {
				return "", nil, err
			}
			arg = id
		case kindBlockquote, kindExpandableBlockquote:
			haveQuote = false
			out = append(out, src[i])
			canStartQuote = true
			u16++
			skip = false
		}
		if !skip {
			e := entity{kind: kind, offset: top.offset, length: u16 - top.offset, arg: arg}
			if userID != 0 {
				e.kind, e.arg, e.userID = kindMentionName, "", userID
			}
			ents = append(ents, e)
		}
		stack = stack[:len(stack)-1]
	}
	if haveQuote {
		kind := kindBlockquote
		if top := stack[len(stack)-1]; top.kind == kindSpoiler && top.byteOffset == len(src)-2 {
			stack = stack[:len(stack)-1]
			kind = kindExpandableBlockquote
		}
		if top := stack[len(stack)-1]; top.kind == kindBlockquote {
			if u16 != top.offset {
				ents = append(ents, entity{kind: kind, offset: top.offset, length: u16 - top.offset})
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return "", nil, errorf("Can't find end of %s entity at byte offset %d", kindInfo[top.kind].name, top.byteOffset)
	}
	sortEntities(ents)
	return string(out), ents, ""
}

// markdownV2Target reads the target of a MarkdownV2 link or custom emoji,
// from i (just after its "(") up to its ")", with its backslash escapes
// undone. It returns the target and the index of the ")", or len(src) when
// the target is not closed.
func markdownV2Target(src string, i int) (string, int) {
	var u strings.Builder
	for i < len(src) && src[i] != ')' {
		if c := byteAt(src, i+1); src[i] == '\\' && c > 0 && c <= 126 {
			u.WriteByte(c)
			i += 2
			continue
		}
		u.WriteByte(src[i])
		i++
	}
	return u.String(), i
}

// parseMarkdown is the legacy Markdown parse mode: *bold*, _italic_,
// `code`, ```pre```, [text](url), no nesting.
func parseMarkdown(src string, users userLookup) (string, []entity, formatError) {
	var out []byte
	var ents []entity
	u16 := 0
	at := func(i int) byte { return byteAt(src, i) }
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == '\\' && (at(i+1) == '_' || at(i+1) == '*' || at(i+1) == '`' || at(i+1) == '[') {
			i++
			out = append(out, src[i])
			u16++
			continue
		}
		if c != '_' && c != '*' && c != '`' && c != '[' {
			u16 += utf16Units(c)
			out = append(out, c)
			continue
		}
		begin := i
		endChar := c
		if c == '[' {
			endChar = ']'
		}
		i++
		pre, lang := false, ""
		if c == '`' && at(i) == '`' && at(i+1) == '`' {
			i += 2
			pre = true
			langEnd := i
			for !isSpaceByte(at(langEnd)) && at(langEnd) != '`' {
				langEnd++
			}
			if i != langEnd && langEnd < len(src) && at(langEnd) != '`' {
				lang = src[i:langEnd]
				i = langEnd
			}
			if at(i) == '\n' || at(i) == '\r' {
				if (at(i+1) == '\n' || at(i+1) == '\r') && at(i) != at(i+1) {
					i += 2
				} else {
					i++
				}
			}
		}
		offset, textBegin := u16, len(out)
		for i < len(src) && (src[i] != endChar || pre && !(at(i+1) == '`' && at(i+2) == '`')) {
			u16 += utf16Units(src[i])
			out = append(out, src[i])
			i++
		}
		if i >= len(src) {
			return "", nil, errorf("Can't find end of the entity starting at byte offset %d", begin)
		}
		if offset != u16 {
			e := entity{offset: offset, length: u16 - offset}
			keep := true
			switch c {
			case '_':
				e.kind = kindItalic
			case '*':
				e.kind = kindBold
			case '[':
				url := string(out[textBegin:])
				if at(i+1) == '(' {
					i += 2
					var u strings.Builder
					for i < len(src) && src[i] != ')' {
						u.WriteByte(src[i])
						i++
					}
					url = u.String()
				}
				e, keep = linkEntity(e, url, users)
			case '`':
				switch {
				case pre && lang == "":
					e.kind = kindPre
				case pre:
					e.kind, e.arg = kindPreCode, lang
				default:
					e.kind = kindCode
				}
			}
			if keep {
				ents = append(ents, e)
			}
		}
		if pre {
			i += 2
		}
	}
	sortEntities(ents)
	return string(out), ents, ""
}

// userLookup finds a user the bot may mention by id (text_mention).
type userLookup func(id int64) (telego.User, bool)

// linkEntity makes e the entity of an inline link to url: a text_mention
// for tg://user?id=<id> of a user Telegram lets the bot mention, a
// text_link for a valid URL; ok is false when neither (the text stays,
// without an entity, as at Telegram).
func linkEntity(e entity, url string, users userLookup) (entity, bool) {
	if id, ok := linkUserID(url); ok {
		if _, known := users(id); !known {
			return e, false
		}
		e.kind, e.userID = kindMentionName, id
		return e, true
	}
	checked, ok := checkLink(url)
	if !ok {
		return e, false
	}
	e.kind, e.arg = kindTextURL, checked
	return e, true
}

// tgLink splits a tg: link (tg:host?query or tg://host?query, any case)
// into its lower-cased host and its arguments.
func tgLink(url string) (host string, args []string, ok bool) {
	lower := asciiLower(url)
	rest, ok := strings.CutPrefix(lower, "tg:")
	if !ok {
		return "", nil, false
	}
	rest = strings.TrimPrefix(rest, "//")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		return rest, nil, true
	}
	host, rest = rest[:end], strings.TrimPrefix(rest[end:], "/")
	query, hasQuery := strings.CutPrefix(rest, "?")
	if !hasQuery {
		return host, nil, true
	}
	query, _, _ = strings.Cut(query, "#")
	return host, strings.Split(query, "&"), true
}

func tgArg(args []string, key string) (string, bool) {
	for _, a := range args {
		if k, v, _ := strings.Cut(a, "="); k == key {
			return v, true
		}
	}
	return "", false
}

// linkUserID reads tg://user?id=<id>.
func linkUserID(url string) (int64, bool) {
	host, args, ok := tgLink(url)
	if !ok || host != "user" {
		return 0, false
	}
	v, ok := tgArg(args, "id")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(v, 10, 64)
	return id, err == nil && id > 0
}

// customEmojiID reads tg://emoji?id=<id>, with TDLib's errors.
func customEmojiID(url string) (string, formatError) {
	host, args, ok := tgLink(url)
	switch {
	case !ok:
		return "", "Custom emoji URL must have scheme tg"
	case host != "emoji":
		return "", `Custom emoji URL must have host "emoji"`
	}
	v, ok := tgArg(args, "id")
	if !ok {
		return "", "Custom emoji URL must have an emoji identifier"
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id == 0 {
		return "", "Invalid custom emoji identifier specified"
	}
	return strconv.FormatInt(id, 10), ""
}

// checkLink validates an inline link's URL and returns it as Telegram
// stores it: http when no scheme is given, the host lower-cased, a path of
// at least "/" (so "example.com" becomes "http://example.com/"); tg: and
// ton: links as tg://host?query. Other schemes, and hosts without a dot,
// are not links.
func checkLink(link string) (string, bool) {
	link = strings.TrimSpace(link)
	for _, scheme := range []string{"tg", "ton"} {
		if !hasASCIIPrefixFold(link, scheme+":") {
			continue
		}
		rest := strings.TrimPrefix(link[len(scheme)+1:], "//")
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		host, query := asciiLower(rest[:end]), rest[end:]
		if host == "" {
			return "", false
		}
		for _, c := range []byte(host) {
			if !isAlnumByte(c) && c != '-' && c != '_' {
				return "", false
			}
		}
		if strings.HasPrefix(query, "/?") {
			query = query[1:]
		}
		return scheme + "://" + host + query, true
	}
	scheme, rest := "http", link
	if i := strings.Index(link, "://"); i >= 0 {
		scheme, rest = asciiLower(link[:i]), link[i+3:]
		if scheme != "http" && scheme != "https" {
			return "", false
		}
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, path := rest[:end], rest[end:]
	userinfo := ""
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	host, port := authority, ""
	if colon := strings.LastIndexByte(authority, ':'); colon >= 0 && !strings.HasSuffix(authority, "]") {
		host, port = authority[:colon], authority[colon:]
		n, err := strconv.Atoi(port[1:])
		if err != nil || n < 1 || n > 65535 {
			return "", false
		}
	}
	host = asciiLower(host)
	if host == "" || !strings.Contains(host, ".") && !strings.HasPrefix(host, "[") {
		return "", false
	}
	for _, r := range host {
		if r < 0x80 && !isAlnumByte(byte(r)) && !strings.ContainsRune("-_.~[]:", r) {
			return "", false
		}
	}
	for _, r := range path {
		if r <= ' ' {
			return "", false
		}
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return scheme + "://" + userinfo + host + port + path, true
}

// formatText is what Telegram makes of text sent with parse_mode, or with
// explicit entities (the entities parameter, JSON; read only without a
// parse mode, as the Bot API does): the text without markup and its
// entities, in Bot API form. users are the users the bot may mention. An
// error is the Bot API's 400.
func formatText(text, parseMode, explicit string, users userLookup) (string, []telego.MessageEntity, *apiError) {
	if text == "" {
		return "", nil, badRequest("message text is empty")
	}
	if !utf8.ValidString(text) {
		return "", nil, badRequest("strings must be encoded in UTF-8")
	}
	var ents []entity
	var perr formatError
	switch strings.ToLower(parseMode) {
	case "":
		if explicit != "" {
			var err *apiError
			if ents, err = explicitEntities(text, explicit, users); err != nil {
				return "", nil, err
			}
		}
	case "html":
		text, ents, perr = parseHTML(text, users)
	case "markdownv2":
		text, ents, perr = parseMarkdownV2(text, users)
	case "markdown":
		text, ents, perr = parseMarkdown(text, users)
	default:
		return "", nil, badRequest("unsupported parse_mode")
	}
	if perr != "" {
		return "", nil, badRequest("can't parse entities: " + string(perr))
	}
	text, ents, ok := fixFormattedText(text, ents)
	if !ok {
		return "", nil, badRequest("message text is empty")
	}
	if utf8.RuneCountInString(text) > 4096 {
		return "", nil, badRequest("message is too long")
	}
	out := make([]telego.MessageEntity, 0, len(ents))
	for _, e := range ents {
		me := telego.MessageEntity{Type: kindInfo[e.kind].api, Offset: e.offset, Length: e.length}
		switch e.kind {
		case kindTextURL:
			me.URL = e.arg
		case kindPreCode:
			me.Language = e.arg
		case kindCustomEmoji:
			me.CustomEmojiID = e.arg
		case kindMentionName:
			u, _ := users(e.userID)
			u = commonUser(u)
			me.User = &u
		}
		out = append(out, me)
	}
	if len(out) == 0 {
		out = nil
	}
	return text, out, nil
}

// explicitEntities reads the entities parameter for text: the kinds a bot
// may set (the ones Telegram finds by itself, such as mention or url, are
// dropped, as Telegram drops them), with their bounds checked against the
// text in UTF-16 code units as TDLib checks them.
func explicitEntities(text, raw string, users userLookup) ([]entity, *apiError) {
	var list []telego.MessageEntity
	if json.Unmarshal([]byte(raw), &list) != nil {
		return nil, badRequest("can't parse entities JSON object")
	}
	// starts[u] is whether UTF-16 offset u begins a character, and at its
	// byte offset.
	starts := map[int]int{}
	u16 := 0
	for i, r := range text {
		starts[u16] = i
		u16 += utf16.RuneLen(r)
	}
	starts[u16] = len(text)
	var ents []entity
	for _, me := range list {
		e := entity{offset: me.Offset, length: me.Length}
		switch me.Type {
		case telego.EntityTypeBold:
			e.kind = kindBold
		case telego.EntityTypeItalic:
			e.kind = kindItalic
		case telego.EntityTypeUnderline:
			e.kind = kindUnderline
		case telego.EntityTypeStrikethrough:
			e.kind = kindStrikethrough
		case telego.EntityTypeSpoiler:
			e.kind = kindSpoiler
		case telego.EntityTypeCode:
			e.kind = kindCode
		case telego.EntityTypePre:
			e.kind = kindPre
			if me.Language != "" {
				e.kind, e.arg = kindPreCode, me.Language
			}
		case telego.EntityTypeBlockquote:
			e.kind = kindBlockquote
		case telego.EntityTypeExpandableBlockquote:
			e.kind = kindExpandableBlockquote
		case telego.EntityTypeTextLink:
			url, ok := checkLink(me.URL)
			if !ok {
				return nil, badRequest("can't parse MessageEntity: wrong URL specified")
			}
			e.kind, e.arg = kindTextURL, url
		case telego.EntityTypeTextMention:
			if me.User == nil {
				return nil, badRequest("can't parse MessageEntity: field \"user\" must be of type Object")
			}
			if _, known := users(me.User.ID); !known {
				return nil, badRequest("have no access to the user")
			}
			e.kind, e.userID = kindMentionName, me.User.ID
		case telego.EntityTypeCustomEmoji:
			id, err := strconv.ParseInt(me.CustomEmojiID, 10, 64)
			if err != nil || id == 0 {
				return nil, badRequest("invalid custom emoji identifier specified")
			}
			e.kind, e.arg = kindCustomEmoji, strconv.FormatInt(id, 10)
		case telego.EntityTypeMention, telego.EntityTypeHashtag, telego.EntityTypeCashtag, telego.EntityTypeBotCommand,
			telego.EntityTypeURL, telego.EntityTypeEmail, telego.EntityTypePhoneNumber:
			continue
		default:
			return nil, badRequest("can't parse MessageEntity: unsupported type specified")
		}
		switch {
		case e.offset < 0 || e.offset > 1000000:
			return nil, badRequest(fmt.Sprintf("receive an entity with incorrect offset %d", e.offset))
		case e.length < 0 || e.length > 1000000:
			return nil, badRequest(fmt.Sprintf("receive an entity with incorrect length %d", e.length))
		case e.length == 0:
			continue
		case e.offset > u16:
			return nil, badRequest(fmt.Sprintf("entity begins after the end of the text at UTF-16 offset %d", e.offset))
		case e.end() > u16:
			return nil, badRequest(fmt.Sprintf("entity beginning at UTF-16 offset %d ends after the end of the text at UTF-16 offset %d", e.offset, e.end()))
		}
		if _, ok := starts[e.offset]; !ok {
			return nil, badRequest(fmt.Sprintf("entity begins in a middle of a UTF-16 symbol at byte offset %d", starts[e.offset-1]+4))
		}
		if _, ok := starts[e.end()]; !ok {
			return nil, badRequest(fmt.Sprintf("entity beginning at UTF-16 offset %d ends in a middle of a UTF-16 symbol at byte offset %d", e.offset, starts[e.end()-1]+4))
		}
		ents = append(ents, e)
	}
	sortEntities(ents)
	return ents, nil
}

// commonUser is u without the fields the Bot API returns only in getMe.
func commonUser(u telego.User) telego.User {
	u.CanJoinGroups, u.CanReadAllGroupMessages, u.SupportsInlineQueries = false, false, false
	u.CanConnectToBusiness, u.HasMainWebApp, u.HasTopicsEnabled, u.AllowsUsersToCreateTopics = false, false, false, false
	return u
}

// fixFormattedText is TDLib's fix_formatted_text for a message a bot sends:
// it cleans the text (control characters become spaces, \r and a few
// invisible marks go), trims spaces and new lines at both ends, drops empty
// entities, merges and splits entities as Telegram stores them, and adds the
// entities Telegram finds by itself. ok is false when nothing is left.
func fixFormattedText(text string, ents []entity) (string, []entity, bool) {
	ents = removeEmpty(ents)
	ents = fixEntities(ents)
	text, ents = cleanInput(text, ents)
	ents = removeEmpty(ents)

	lastByte, lastU16 := -1, -1
	u16 := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != ' ' && c != '\n' {
			for i+1 < len(text) && text[i+1]&0xc0 == 0x80 {
				i++
			}
			if c >= 0xf0 {
				u16++
			}
			lastByte, lastU16 = i, u16
		}
		u16++
	}
	if lastByte < 0 {
		return "", nil, false
	}
	ents = fixEntities(ents)

	// Trim the end: entities there shrink or go.
	text = text[:lastByte+1]
	kept := ents[:0]
	for _, e := range ents {
		if e.offset > lastU16 {
			continue
		}
		if e.end() > lastU16+1 {
			e.length = lastU16 + 1 - e.offset
		}
		kept = append(kept, e)
	}
	ents = kept
	sortEntities(ents)

	// Trim the start, up to the first entity.
	first := len(text)
	if len(ents) > 0 {
		first = ents[0].offset
	}
	n := 0
	for n < first && n < len(text) && (text[n] == ' ' || text[n] == '\n') {
		n++
	}
	if n > 0 {
		text = text[n:]
		for i := range ents {
			ents[i].offset -= n
		}
	}
	if blank(text) {
		return "", nil, false
	}
	return text, mergeNewEntities(ents, findEntities(text)), true
}

// blank reports whether text shows nothing: spaces and invisible fillers
// only.
func blank(text string) bool {
	for _, r := range text {
		switch {
		case unicode.IsSpace(r), r >= 0x200b && r <= 0x200f, r == 0x2060, r == 0xfeff, r == 0x2800,
			r == 0x3164, r == 0x115f, r == 0x1160, r == 0xffa0, r == 0x034f:
		default:
			return false
		}
	}
	return true
}

func removeEmpty(ents []entity) []entity {
	return slices.DeleteFunc(ents, func(e entity) bool {
		switch {
		case e.length <= 0:
			return true
		case e.kind == kindTextURL:
			return e.arg == ""
		case e.kind == kindMentionName:
			return e.userID <= 0
		case e.kind == kindCustomEmoji:
			return e.arg == ""
		}
		return false
	})
}

// cleanInput replaces control characters by spaces and removes \r, the
// line and paragraph separators and direction marks U+2028–U+202E and the
// combining vertical lines U+030A, U+0333 and U+033F, moving entity bounds
// with the text.
func cleanInput(text string, ents []entity) (string, []entity) {
	var out strings.Builder
	// moved[u] is where UTF-16 offset u of text lands in the result.
	moved := make([]int, 0, len(text)+1)
	u16 := 0
	for _, r := range text {
		units := 1
		if r > 0xffff {
			units = 2
		}
		for range units {
			moved = append(moved, u16)
		}
		switch {
		case r == '\r', r >= 0x2028 && r <= 0x202e, r == 0x030a, r == 0x0333, r == 0x033f:
			continue
		case r < 32 && r != '\n':
			r = ' '
		}
		out.WriteRune(r)
		u16 += units
	}
	moved = append(moved, u16)
	for i := range ents {
		start, end := moved[min(ents[i].offset, len(moved)-1)], moved[min(ents[i].end(), len(moved)-1)]
		ents[i].offset, ents[i].length = start, end-start
	}
	return out.String(), ents
}

// fixEntities makes entities nest as Telegram allows: entities other than
// the splittable ones (bold, italic, underline, strikethrough, spoiler)
// never overlap or nest in each other (the later of two goes), quotations
// take whole entities only, and the splittable ones are merged when they
// touch and split around the others, leaving code and pre.
func fixEntities(ents []entity) []entity {
	sortEntities(ents)
	var continuous, quotes, splittable []entity
	for _, e := range ents {
		switch {
		case e.kind.splittable():
			splittable = append(splittable, e)
		case e.kind.blockquote():
			quotes = append(quotes, e)
		default:
			continuous = append(continuous, e)
		}
	}
	continuous = removeIntersecting(continuous)
	if len(quotes) > 0 {
		quotes = removeIntersecting(quotes)
		continuous = removeIntersectingQuotes(continuous, quotes)
		continuous = append(continuous, quotes...)
		sortEntities(continuous)
	}
	return resplit(splittable, continuous)
}

// removeIntersecting keeps, of sorted entities, those that begin after the
// previous kept one ends.
func removeIntersecting(ents []entity) []entity {
	var out []entity
	end := 0
	for _, e := range ents {
		if e.offset >= end {
			out = append(out, e)
			end = e.end()
		}
	}
	return out
}

// removeIntersectingQuotes drops the entities that a quotation cuts.
func removeIntersectingQuotes(ents, quotes []entity) []entity {
	var out []entity
	q := 0
	for _, e := range ents {
		for q < len(quotes) && quotes[q].end() <= e.offset {
			q++
		}
		if q < len(quotes) && (quotes[q].end() < e.end() || e.offset < quotes[q].offset && quotes[q].offset < e.end()) {
			continue
		}
		out = append(out, e)
	}
	return out
}

func resplit(splittable, others []entity) []entity {
	if len(splittable) == 0 {
		return others
	}
	splittable = splitEntities(splittable, others)
	if len(others) == 0 {
		return splittable
	}
	out := slices.Concat(others, splittable)
	sortEntities(out)
	return out
}

// splitEntities merges touching splittable entities of one kind and cuts
// them at the bounds of the other entities, dropping the pieces inside code
// and pre.
func splitEntities(splittable, others []entity) []entity {
	var begin, end [5]int
	var out []entity
	next := 0
	flush := func(offset int) {
		for _, k := range splitOrder {
			i := k.splitIndex()
			if end[i] != 0 && begin[i] < offset {
				if end[i] <= offset {
					out = append(out, entity{kind: k, offset: begin[i], length: end[i] - begin[i]})
					begin[i], end[i] = 0, 0
				} else {
					out = append(out, entity{kind: k, offset: begin[i], length: offset - begin[i]})
					begin[i] = offset
				}
			}
		}
	}
	add := func(until int) {
		for ; next < len(splittable) && splittable[next].offset < until; next++ {
			e := splittable[next]
			i := e.kind.splitIndex()
			if e.offset <= end[i] && end[i] != 0 {
				end[i] = max(end[i], e.end())
			} else {
				flush(e.offset)
				begin[i], end[i] = e.offset, e.end()
			}
		}
		flush(until)
	}
	var stack []entity
	addOffset := func(offset int) {
		for len(stack) > 0 && offset >= stack[len(stack)-1].end() {
			top := stack[len(stack)-1]
			n := len(out)
			add(top.end())
			if top.kind.code() {
				out = out[:n] // nothing is bold inside code
			}
			stack = stack[:len(stack)-1]
		}
		add(offset)
	}
	for _, o := range others {
		addOffset(o.offset)
		stack = append(stack, o)
	}
	addOffset(int(^uint(0) >> 1))
	sortEntities(out)
	return out
}

// mergeNewEntities adds the entities Telegram finds by itself to those of
// the markup: a found one that would cut a quotation or overlap an entity
// other than bold, italic, underline, strikethrough or spoiler goes, and
// those are split around the found ones.
func mergeNewEntities(ents, found []entity) []entity {
	if len(found) == 0 {
		return ents
	}
	var continuous, quotes, splittable []entity
	for _, e := range ents {
		switch {
		case e.kind.splittable():
			splittable = append(splittable, e)
		case e.kind.blockquote():
			quotes = append(quotes, e)
		default:
			continuous = append(continuous, e)
		}
	}
	found = removeIntersectingQuotes(found, quotes)
	var merged []entity
	f := 0
	for _, old := range continuous {
		for f < len(found) && found[f].end() <= old.offset {
			merged = append(merged, found[f])
			f++
		}
		merged = append(merged, old)
		for f < len(found) && found[f].offset < old.end() {
			f++
		}
	}
	merged = append(merged, found[f:]...)
	if len(quotes) > 0 {
		merged = append(merged, quotes...)
		sortEntities(merged)
	}
	return resplit(splittable, merged)
}

// findEntities finds what Telegram marks in any text by itself: @mentions,
// /commands, #hashtags, $CASHTAGS and URLs written with http:// or
// https://. (Telegram also finds bare domains, e-mail addresses, phone and
// bank card numbers; the fake does not.) The result is sorted and has no
// overlaps.
func findEntities(text string) []entity {
	var found []entity // byte offsets until the end
	add := func(kind entityKind, begin, end int) {
		found = append(found, entity{kind: kind, offset: begin, length: end - begin})
	}
	for _, m := range matchMentions(text) {
		add(kindMention, m[0], m[1])
	}
	for _, m := range matchBotCommands(text) {
		add(kindBotCommand, m[0], m[1])
	}
	for _, m := range matchHashtags(text, '#') {
		add(kindHashtag, m[0], m[1])
	}
	for _, m := range matchCashtags(text) {
		add(kindCashtag, m[0], m[1])
	}
	for _, m := range matchURLs(text) {
		add(kindURL, m[0], m[1])
	}
	if len(found) == 0 {
		return nil
	}
	sortEntities(found)
	found = removeIntersecting(found)
	for i := range found {
		start := utf16Len(text[:found[i].offset])
		found[i].length = utf16Len(text[found[i].offset:found[i].end()])
		found[i].offset = start
	}
	return found
}

func runeBefore(text string, i int) rune {
	if i == 0 {
		return 0
	}
	r, _ := utf8.DecodeLastRuneInString(text[:i])
	return r
}

func runeAt(text string, i int) rune {
	if i >= len(text) {
		return 0
	}
	r, _ := utf8.DecodeRuneInString(text[i:])
	return r
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' }

func isUsernameByte(c byte) bool { return isAlnumByte(c) || c == '_' }

// matchMentions finds @username: 2–32 of [A-Za-z0-9_] between non-word
// characters; of those shorter than 4 only @gif, @vid and @pic.
func matchMentions(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || isWordRune(runeBefore(text, i)) {
			continue
		}
		j := i + 1
		for j < len(text) && isUsernameByte(text[j]) {
			j++
		}
		n := j - i - 1
		if n < 2 || n > 32 || isWordRune(runeAt(text, j)) {
			continue
		}
		if name := asciiLower(text[i+1 : j]); n < 4 && name != "gif" && name != "vid" && name != "pic" {
			continue
		}
		out = append(out, [2]int{i, j})
		i = j - 1
	}
	return out
}

// matchBotCommands finds /command and /command@bot_username.
func matchBotCommands(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); i++ {
		if text[i] != '/' {
			continue
		}
		if p := runeBefore(text, i); isWordRune(p) || p == '/' || p == '<' || p == '>' {
			continue
		}
		j := i + 1
		for j < len(text) && isUsernameByte(text[j]) {
			j++
		}
		if n := j - i - 1; n < 1 || n > 64 {
			continue
		}
		if j < len(text) && text[j] == '@' {
			k := j + 1
			for k < len(text) && isUsernameByte(text[k]) {
				k++
			}
			if n := k - j - 1; n < 3 || n > 32 {
				continue
			}
			j = k
		}
		if r := runeAt(text, j); isWordRune(r) || r == '/' || r == '<' || r == '>' {
			continue
		}
		out = append(out, [2]int{i, j})
		i = j - 1
	}
	return out
}

func isHashtagRune(r rune) bool {
	return r == '_' || r == 0x200c || r == 0xb7 || r >= 0xd80 && r <= 0xdff || unicode.IsLetter(r) || unicode.Is(unicode.Nd, r)
}

// matchHashtags finds #hashtag: up to 256 hashtag characters with at least
// one letter, not followed by another mark.
func matchHashtags(text string, mark byte) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); i++ {
		if text[i] != mark || isHashtagRune(runeBefore(text, i)) {
			continue
		}
		j, end, n, letter := i+1, -1, 0, false
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if !isHashtagRune(r) {
				break
			}
			j += size
			if n == 255 {
				end = j
			}
			if n != 256 {
				letter = letter || unicode.IsLetter(r)
				n++
			}
		}
		if end < 0 {
			end = j
		}
		if n < 1 || j < len(text) && text[j] == mark || !letter {
			continue
		}
		out = append(out, [2]int{i, end})
		i = j - 1
	}
	return out
}

// matchCashtags finds $USD: $ and 1–8 capital letters (or $1INCH).
func matchCashtags(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); i++ {
		if text[i] != '$' {
			continue
		}
		if p := runeBefore(text, i); isHashtagRune(p) || p == '$' {
			continue
		}
		j := i + 1
		if strings.HasPrefix(text[j:], "1INCH") {
			j += 5
		} else {
			for j < len(text) && text[j] >= 'A' && text[j] <= 'Z' {
				j++
			}
		}
		if n := j - i - 1; n < 1 || n > 8 {
			continue
		}
		if r := runeAt(text, j); j < len(text) && (isHashtagRune(r) || r == '$') {
			continue
		}
		out = append(out, [2]int{i, j})
		i = j - 1
	}
	return out
}

// matchURLs finds URLs written with http:// or https://, cut as Telegram
// cuts them: unbalanced closing brackets and trailing punctuation are not
// part of the URL.
func matchURLs(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); i++ {
		if text[i] != 'h' && text[i] != 'H' {
			continue
		}
		var schemeLen int
		switch {
		case hasASCIIPrefixFold(text[i:], "https://"):
			schemeLen = 8
		case hasASCIIPrefixFold(text[i:], "http://"):
			schemeLen = 7
		default:
			continue
		}
		if isWordRune(runeBefore(text, i)) {
			continue
		}
		end := i + schemeLen
		for end < len(text) {
			r, size := utf8.DecodeRuneInString(text[end:])
			if unicode.IsSpace(r) || r == '<' || r == '>' || r == '"' || r == '«' || r == '»' {
				break
			}
			end += size
		}
		if n := fixURL(text[i+schemeLen : end]); n >= 0 {
			out = append(out, [2]int{i, i + schemeLen + n})
		}
		i = end - 1
	}
	return out
}

// asciiLower lower-cases the ASCII letters of s only, as TDLib does (a
// Unicode lower-casing can change the length of a string).
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// hasASCIIPrefixFold reports whether s begins with the lower-case ASCII
// prefix, in any case.
func hasASCIIPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := range len(prefix) {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// fixURL returns how much of a URL after its scheme is the URL, or -1 when
// its host is not a domain.
func fixURL(s string) int {
	hostEnd := strings.IndexAny(s, "/?#")
	if hostEnd < 0 {
		hostEnd = len(s)
	}
	host, path := s[:hostEnd], s[hostEnd:]
	var balance [3]int
	n := 0
	for ; n < len(path); n++ {
		switch path[n] {
		case '(':
			balance[0]++
		case '[':
			balance[1]++
		case '{':
			balance[2]++
		case ')':
			balance[0]--
		case ']':
			balance[1]--
		case '}':
			balance[2]--
		}
		if balance[0] < 0 || balance[1] < 0 || balance[2] < 0 {
			break
		}
	}
	for n > 0 && strings.IndexByte(".:;,('?!`", path[n-1]) >= 0 {
		n--
	}
	if n == 0 {
		// A bare host: punctuation after it is not part of it either.
		for len(host) > 0 && strings.IndexByte(".:;,('?!`", host[len(host)-1]) >= 0 {
			host = host[:len(host)-1]
		}
	}
	domain := host
	if at := strings.LastIndexByte(domain, '@'); at >= 0 {
		domain = domain[at+1:]
	}
	if colon := strings.LastIndexByte(domain, ':'); colon >= 0 {
		domain = domain[:colon]
	}
	parts := strings.Split(domain, ".")
	if len(parts) < 2 {
		return -1
	}
	if ipv4(parts) {
		return urlLength(host, n)
	}
	for _, p := range parts {
		if p == "" || len(p) >= 64 || strings.HasSuffix(p, "-") {
			return -1
		}
		for _, r := range p {
			if r < 0x80 && !isAlnumByte(byte(r)) && r != '-' && r != '_' {
				return -1
			}
		}
	}
	tld := parts[len(parts)-1]
	if utf8.RuneCountInString(tld) <= 1 || strings.ContainsAny(tld, "_-") && !strings.HasPrefix(tld, "xn--") {
		return -1
	}
	if strings.Contains(parts[len(parts)-2], "_") {
		return -1
	}
	return urlLength(host, n)
}

func urlLength(host string, path int) int {
	if path == 0 {
		return len(host)
	}
	return len(host) + path
}

// ipv4 reports whether a host's dot-separated parts are an IPv4 address.
func ipv4(parts []string) bool {
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || len(p) > 1 && p[0] == '0' {
			return false
		}
	}
	return true
}
