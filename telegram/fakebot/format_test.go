package fakebot_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

func ent(typ string, offset, length int) telego.MessageEntity {
	return telego.MessageEntity{Type: typ, Offset: offset, Length: length}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	fake, url := start(t, fakebot.Opts{})
	const botID = 80
	fb := fake.Bot(fakebot.Token(botID))
	if _, err := fb.Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	bot := client(t, url, botID)
	mention := telego.MessageEntity{Type: "text_mention", Offset: 0, Length: 5, User: &alice}

	const nested = "bold italic bold italic bold strikethrough italic bold strikethrough spoiler underline italic bold bold"
	cases := []struct {
		name, mode, text string
		want             string
		entities         []telego.MessageEntity
	}{
		// HTML.
		{"HTML bold and strong", "HTML", "<b>bold</b>, <strong>strong</strong>", "bold, strong",
			[]telego.MessageEntity{ent("bold", 0, 4), ent("bold", 6, 6)}},
		{"HTML tags are case-insensitive", "html", "<B>x</B> <EM>y</EM>", "x y",
			[]telego.MessageEntity{ent("bold", 0, 1), ent("italic", 2, 1)}},
		// Telegram stores nested bold, italic, underline, strikethrough and
		// spoiler flattened: cut where another one begins or ends.
		{"HTML nested entities are cut into pieces as Telegram stores them", "HTML",
			"<b>bold <i>italic <u>under <s>strike</s></u></i></b>", "bold italic under strike", []telego.MessageEntity{
				ent("bold", 0, 5),
				ent("bold", 5, 7), ent("italic", 5, 7),
				ent("bold", 12, 6), ent("italic", 12, 6), ent("underline", 12, 6),
				ent("bold", 18, 6), ent("italic", 18, 6), ent("underline", 18, 6), ent("strikethrough", 18, 6)}},
		{"HTML every strikethrough, underline and spoiler spelling", "HTML",
			`<s>a</s><strike>b</strike><del>c</del> <u>d</u><ins>e</ins> <tg-spoiler>f</tg-spoiler><span class="tg-spoiler">g</span>`,
			"abc de fg", []telego.MessageEntity{ent("strikethrough", 0, 3), ent("underline", 4, 2), ent("spoiler", 7, 2)}},
		{"HTML inline link keeps its URL", "HTML", `<a href="http://www.example.com/">inline URL</a>`, "inline URL",
			[]telego.MessageEntity{{Type: "text_link", Offset: 0, Length: 10, URL: "http://www.example.com/"}}},
		{"HTML link without a scheme becomes http with a path", "HTML", `<a href='Example.COM'>x</a>`, "x",
			[]telego.MessageEntity{{Type: "text_link", Offset: 0, Length: 1, URL: "http://example.com/"}}},
		{"HTML link that is not a URL leaves the text plain", "HTML", `<a href="javascript:alert(1)">x</a>`, "x", nil},
		{"HTML mention of a user the bot knows", "HTML", `<a href="tg://user?id=1001">Alice</a>`, "Alice",
			[]telego.MessageEntity{mention}},
		{"HTML mention of a user the bot never met is plain text", "HTML", `<a href="tg://user?id=424242">Who</a>`, "Who", nil},
		{"HTML code and pre with a language", "HTML",
			`<code>x</code> <pre>y</pre> <pre><code class="language-python">print(1)</code></pre>`, "x y print(1)",
			[]telego.MessageEntity{ent("code", 0, 1), ent("pre", 2, 1), {Type: "pre", Offset: 4, Length: 8, Language: "python"}}},
		{"HTML a language outside pre is dropped", "HTML", `<code class="language-go">x</code>`, "x",
			[]telego.MessageEntity{ent("code", 0, 1)}},
		{"HTML custom emoji counts UTF-16 units", "HTML", `<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>`, "👍",
			[]telego.MessageEntity{{Type: "custom_emoji", Offset: 0, Length: 2, CustomEmojiID: "5368324170671202286"}}},
		{"HTML block quotations", "HTML", "<blockquote>quoted</blockquote>\n<blockquote expandable>hidden</blockquote>",
			"quoted\nhidden", []telego.MessageEntity{ent("blockquote", 0, 6), ent("expandable_blockquote", 7, 6)}},
		{"HTML character references, and the ones Telegram does not know stay", "HTML",
			"a &lt;b&gt; &amp; &quot;c&quot; &#65;&#x42; &nbsp; &#x1F600; &#xd83d;&#xde00;", `a <b> & "c" AB &nbsp; 😀 😀`, nil},
		{"HTML offsets count UTF-16 code units", "HTML", "Привет <b>😀мир</b>", "Привет 😀мир",
			[]telego.MessageEntity{ent("bold", 7, 5)}},
		{"HTML touching bold merges", "HTML", "<b>a</b><b>b</b>", "ab", []telego.MessageEntity{ent("bold", 0, 2)}},
		{"HTML bold is split around a link", "HTML", `<b>x<a href="https://t.me">y</a>z</b>`, "xyz",
			[]telego.MessageEntity{ent("bold", 0, 1), {Type: "text_link", Offset: 1, Length: 1, URL: "https://t.me/"},
				ent("bold", 1, 1), ent("bold", 2, 1)}},
		{"HTML nothing is bold inside code", "HTML", "<code>a<b>b</b></code>", "ab", []telego.MessageEntity{ent("code", 0, 2)}},
		{"HTML spaces and new lines are trimmed outside entities", "HTML", "  <b> hi </b>  \n", " hi",
			[]telego.MessageEntity{ent("bold", 0, 3)}},
		{"HTML found entities are split out of bold", "HTML", "<b>see https://t.me/x</b>", "see https://t.me/x",
			[]telego.MessageEntity{ent("bold", 0, 4), ent("url", 4, 14), ent("bold", 4, 14)}},

		// MarkdownV2.
		{"MarkdownV2 bold with an escaped star", "MarkdownV2", `*bold \*text*`, "bold *text",
			[]telego.MessageEntity{ent("bold", 0, 10)}},
		{"MarkdownV2 italic, underline, strikethrough and spoiler", "MarkdownV2", "_italic_ __underline__ ~strike~ ||spoiler||",
			"italic underline strike spoiler", []telego.MessageEntity{ent("italic", 0, 6), ent("underline", 7, 9),
				ent("strikethrough", 17, 6), ent("spoiler", 24, 7)}},
		{"MarkdownV2 the Bot API's nesting example", "MarkdownV2",
			"*bold _italic bold ~italic bold strikethrough ||italic bold strikethrough spoiler||~ __underline italic bold___ bold*",
			nested, []telego.MessageEntity{
				ent("bold", 0, 5),
				ent("bold", 5, 12), ent("italic", 5, 12),
				ent("bold", 17, 26), ent("italic", 17, 26), ent("strikethrough", 17, 26),
				ent("bold", 43, 34), ent("italic", 43, 34), ent("strikethrough", 43, 33), ent("spoiler", 43, 33),
				ent("bold", 77, 26), ent("italic", 77, 21), ent("underline", 77, 21)}},
		{"MarkdownV2 link, mention and custom emoji", "MarkdownV2",
			"[Alice](tg://user?id=1001) [site](http://www.example.com/) ![👍](tg://emoji?id=5368324170671202286)", "Alice site 👍",
			[]telego.MessageEntity{mention, {Type: "text_link", Offset: 6, Length: 4, URL: "http://www.example.com/"},
				{Type: "custom_emoji", Offset: 11, Length: 2, CustomEmojiID: "5368324170671202286"}}},
		{"MarkdownV2 code and a pre block with a language", "MarkdownV2", "`x` ```python\nprint(1)\n```", "x print(1)",
			[]telego.MessageEntity{ent("code", 0, 1), {Type: "pre", Offset: 2, Length: 8, Language: "python"}}},
		{"MarkdownV2 escapes inside pre", "MarkdownV2", "```\na\\`b\\\\c\n```", "a`b\\c", []telego.MessageEntity{ent("pre", 0, 5)}},
		{"MarkdownV2 block quotation with its new line", "MarkdownV2", ">quote line 1\n>line 2\nafter",
			"quote line 1\nline 2\nafter", []telego.MessageEntity{ent("blockquote", 0, 20)}},
		{"MarkdownV2 expandable block quotation", "MarkdownV2", "**>hidden\n>more||\nafter", "hidden\nmore\nafter",
			[]telego.MessageEntity{ent("expandable_blockquote", 0, 12)}},
		{"MarkdownV2 bold may span lines", "MarkdownV2", "*a\nb*", "a\nb", []telego.MessageEntity{ent("bold", 0, 3)}},

		// Legacy Markdown.
		{"Markdown entities without nesting", "Markdown", "*bold* _italic_ `code` [link](https://example.com) *a _b_*",
			"bold italic code link a _b_", []telego.MessageEntity{ent("bold", 0, 4), ent("italic", 5, 6), ent("code", 12, 4),
				{Type: "text_link", Offset: 17, Length: 4, URL: "https://example.com/"}, ent("bold", 22, 5)}},
		{"Markdown pre with a language", "Markdown", "```go\nx := 1```", "x := 1",
			[]telego.MessageEntity{{Type: "pre", Offset: 0, Length: 6, Language: "go"}}},

		// No parse mode: the text stays, and Telegram marks what it finds.
		{"plain text keeps its markup", "", "<b>x</b> *y*", "<b>x</b> *y*", nil},
		{"plain text gets the entities Telegram finds", "",
			"Hi @alice_bot, see https://example.com/docs. Use /help #tag $USD (http://t.me/a_(b)).",
			"Hi @alice_bot, see https://example.com/docs. Use /help #tag $USD (http://t.me/a_(b)).",
			[]telego.MessageEntity{ent("mention", 3, 10), ent("url", 19, 24), ent("bot_command", 49, 5),
				ent("hashtag", 55, 4), ent("cashtag", 60, 4), ent("url", 66, 17)}},
		{"a short or embedded @ is no mention", "", "a@bc @ab @gif x", "a@bc @ab @gif x",
			[]telego.MessageEntity{ent("mention", 9, 4)}},
		{"control characters become spaces and carriage returns go", "HTML", "a\tb\r\n<b>c</b>", "a b\nc",
			[]telego.MessageEntity{ent("bold", 4, 1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{
				ChatID: telego.ChatID{ID: alice.ID}, Text: c.text, ParseMode: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			if m.Text != c.want {
				t.Errorf("text = %q, want %q", m.Text, c.want)
			}
			got, _ := json.Marshal(m.Entities)
			want, _ := json.Marshal(c.entities)
			if string(got) != string(want) {
				t.Errorf("entities\n got %s\nwant %s", got, want)
			}
		})
	}

	t.Run("the sandbox's read model shows the text without markup and keeps the entities", func(t *testing.T) {
		if _, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{
			ChatID: telego.ChatID{ID: alice.ID}, Text: "<b>Hello</b>, <i>you</i>", ParseMode: telego.ModeHTML}); err != nil {
			t.Fatal(err)
		}
		chat, ok := fb.Chat(alice.ID)
		if !ok {
			t.Fatal("no chat")
		}
		last := chat.Messages[len(chat.Messages)-1]
		got, _ := json.Marshal(last.Entities)
		if last.Text != "Hello, you" || last.ParseMode != "HTML" || string(got) != `[{"type":"bold","offset":0,"length":5},{"type":"italic","offset":7,"length":3}]` {
			t.Fatalf("the user sees %+v", last)
		}
	})

	t.Run("an edit to the same text in another markup is not a change", func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Second)
		m, err := bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "<b>x</b>", ParseMode: "HTML"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bot.EditMessageText(ctx, &telego.EditMessageTextParams{ChatID: telego.ChatID{ID: alice.ID}, MessageID: m.MessageID,
			Text: "*x*", ParseMode: "MarkdownV2"})
		wantAPIError(t, err, 400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
		edited, err := bot.EditMessageText(ctx, &telego.EditMessageTextParams{ChatID: telego.ChatID{ID: alice.ID}, MessageID: m.MessageID,
			Text: "_x_", ParseMode: "MarkdownV2"})
		if err != nil {
			t.Fatal(err)
		}
		if edited.Text != "x" || len(edited.Entities) != 1 || edited.Entities[0].Type != "italic" {
			t.Fatalf("edited = %+v", edited)
		}
	})
}

func TestParseModeErrors(t *testing.T) {
	t.Parallel()
	fake, url := start(t, fakebot.Opts{})
	const botID = 81
	if _, err := fake.Bot(fakebot.Token(botID)).Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	bot := client(t, url, botID)
	const cant = "Bad Request: can't parse entities: "
	cases := []struct{ mode, text, want string }{
		{"HTML", "line<br>break", cant + `Unsupported start tag "br" at byte offset 4`},
		{"HTML", "a < b", cant + `Unsupported start tag "" at byte offset 2`},
		{"HTML", "<b>x", cant + `Can't find end tag corresponding to start tag "b"`},
		{"HTML", "x</b>", cant + "Unexpected end tag at byte offset 1"},
		{"HTML", "<b>x</i>", cant + `Unmatched end tag at byte offset 4, expected "</b>", found "</i>"`},
		{"HTML", "<b", cant + "Unclosed start tag at byte offset 0"},
		{"HTML", "<b>x</b", cant + "Unclosed end tag at byte offset 4"},
		{"HTML", "<span>x</span>", cant + `Tag "span" must have class "tg-spoiler" at byte offset 0`},
		{"HTML", `<a href=x"y">t</a>`, cant + "Unexpected end of name token at byte offset 8"},
		{"HTML", `<tg-emoji emoji-id="abc">x</tg-emoji>`, cant + "Invalid custom emoji identifier specified"},
		{"HTML", `<tg-time unix="1" format="r">x</tg-time>`, cant + `Unsupported start tag "tg-time" at byte offset 0`},
		{"HTML", "&#xd83d; alone", cant + "Text contains invalid Unicode characters after decoding HTML entities, check for unmatched surrogate code units"},
		{"HTML", "<b></b>", "Bad Request: message text is empty"},
		{"HTML", "<b> </b>\n", "Bad Request: message text is empty"},
		{"MarkdownV2", "Hello.", cant + `Character '.' is reserved and must be escaped with the preceding '\'`},
		{"MarkdownV2", "a > b", cant + `Character '>' is reserved and must be escaped with the preceding '\'`},
		{"MarkdownV2", "*bold", cant + "Can't find end of Bold entity at byte offset 0"},
		{"MarkdownV2", "x __u", cant + "Can't find end of Underline entity at byte offset 2"},
		{"MarkdownV2", "[text](http://x.com", cant + "Can't find end of a URL at byte offset 7"},
		{"MarkdownV2", ">q *b\nc*", cant + "Can't find end of Bold entity at byte offset 3"},
		{"MarkdownV2", "![x](https://example.com)", cant + "Custom emoji URL must have scheme tg"},
		{"MarkdownV2", "![x]", cant + "Custom emoji entity must contain a tg://emoji URL"},
		{"Markdown", "*unclosed", cant + "Can't find end of the entity starting at byte offset 0"},
		{"Markdown", "2*3", cant + "Can't find end of the entity starting at byte offset 1"},
		{"BBCode", "x", "Bad Request: unsupported parse_mode"},
		{"HTML", "", "Bad Request: message text is empty"},
	}
	for _, c := range cases {
		t.Run(c.mode+" "+c.text+" is refused", func(t *testing.T) {
			_, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{
				ChatID: telego.ChatID{ID: alice.ID}, Text: c.text, ParseMode: c.mode})
			wantAPIError(t, err, 400, c.want)
		})
	}
	t.Run("a refused text never reached the chat", func(t *testing.T) {
		chat, _ := fake.Bot(fakebot.Token(botID)).Chat(alice.ID)
		if len(chat.Messages) != 1 { // the /start
			t.Fatalf("messages = %+v", chat.Messages)
		}
	})
}

func TestExplicitEntities(t *testing.T) {
	t.Parallel()
	fake, url := start(t, fakebot.Opts{})
	const botID = 82
	if _, err := fake.Bot(fakebot.Token(botID)).Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	bot := client(t, url, botID)
	send := func(text string, entities ...telego.MessageEntity) (*telego.Message, error) {
		return bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{
			ChatID: telego.ChatID{ID: alice.ID}, Text: text, Entities: entities})
	}

	t.Run("entities sent with the text are normalised as Telegram stores them", func(t *testing.T) {
		m, err := send(" 😀 bold and a link @alice_bot ",
			ent("bold", 1, 7),    // 😀 bold
			ent("italic", 4, 4),  // bold, inside the bold
			ent("mention", 0, 1), // Telegram finds mentions itself
			telego.MessageEntity{Type: "text_link", Offset: 15, Length: 4, URL: "Example.com"},
			telego.MessageEntity{Type: "text_mention", Offset: 20, Length: 10, User: &alice},
			ent("code", 2, 0)) // empty: dropped
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(m.Entities)
		want, _ := json.Marshal([]telego.MessageEntity{
			ent("bold", 0, 3), ent("bold", 3, 4), ent("italic", 3, 4),
			{Type: "text_link", Offset: 14, Length: 4, URL: "http://example.com/"},
			{Type: "text_mention", Offset: 19, Length: 10, User: &alice},
		})
		if m.Text != "😀 bold and a link @alice_bot" || string(got) != string(want) {
			t.Fatalf("text %q\n got %s\nwant %s", m.Text, got, want)
		}
	})

	t.Run("a parse mode wins over entities", func(t *testing.T) {
		m, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID},
			Text: "<i>x</i>", ParseMode: "HTML", Entities: []telego.MessageEntity{ent("bold", 0, 1)}})
		if err != nil || m.Text != "x" || len(m.Entities) != 1 || m.Entities[0].Type != "italic" {
			t.Fatalf("message %+v, %v", m, err)
		}
	})

	for _, c := range []struct {
		name     string
		text     string
		entities []telego.MessageEntity
		want     string
	}{
		{"an entity past the end", "abc", []telego.MessageEntity{ent("bold", 4, 1)},
			"Bad Request: entity begins after the end of the text at UTF-16 offset 4"},
		{"an entity running past the end", "abc", []telego.MessageEntity{ent("bold", 1, 3)},
			"Bad Request: entity beginning at UTF-16 offset 1 ends after the end of the text at UTF-16 offset 4"},
		{"an entity starting inside a surrogate pair", "a😀b", []telego.MessageEntity{ent("bold", 2, 1)},
			"Bad Request: entity begins in a middle of a UTF-16 symbol at byte offset 5"},
		{"an entity ending inside a surrogate pair", "a😀b", []telego.MessageEntity{ent("bold", 0, 2)},
			"Bad Request: entity beginning at UTF-16 offset 0 ends in a middle of a UTF-16 symbol at byte offset 5"},
		{"a negative offset", "abc", []telego.MessageEntity{ent("bold", -1, 1)},
			"Bad Request: receive an entity with incorrect offset -1"},
		{"a type the Bot API does not have", "abc", []telego.MessageEntity{ent("blink", 0, 1)},
			"Bad Request: can't parse MessageEntity: unsupported type specified"},
		{"a mention of a user the bot never met", "abc", []telego.MessageEntity{{Type: "text_mention", Offset: 0, Length: 1, User: &telego.User{ID: 31337, FirstName: "X"}}},
			"Bad Request: have no access to the user"},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			_, err := send(c.text, c.entities...)
			wantAPIError(t, err, 400, c.want)
		})
	}
}
