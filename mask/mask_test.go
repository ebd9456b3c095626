package mask_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"switchyard/mask"
)

// digitsOf is s without anything but its digits.
func digitsOf(s string) string { return regexp.MustCompile(`\D`).ReplaceAllString(s, "") }

func TestPhones(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		// Phones, spelled as people write them.
		{"international with spaces and dashes", "+7 999 123-45-67", "+7***4567"},
		{"international, digits only", "+79161112233", "+7***2233"},
		{"international with an area code in parentheses", "+7 (916) 111-22-33", "+7***2233"},
		{"international, parentheses without spaces", "+7(916)111-22-33", "+7***2233"},
		{"international with dashes only", "+7-926-000-99-88", "+7***9988"},
		{"a British number", "+44 20 7946 0958", "+4***0958"},
		{"an American number", "+1 (415) 555-2671", "+1***2671"},
		{"domestic with a trunk 8 and parentheses", "8 (916) 111-22-33", "***2233"},
		{"domestic, digits only", "89161112244", "***2244"},
		{"domestic with dashes", "8-916-111-22-33", "***2233"},
		{"domestic with spaces", "8 916 555 12 34", "***1234"},
		{"ten digits with dots", "916.111.22.33", "***2233"},
		{"ten digits, area code in parentheses", "(916)1112233", "***2233"},
		{"ten digits, digits only", "9161112233", "***2233"},
		{"with no-break spaces", "+7\u00a0916\u00a0111\u00a022\u00a033", "+7***2233"},
		{"with en dashes", "8 916 111\u201322\u201333", "***2233"},
		{"a tel: link", "tel:+79161112233", "tel:+7***2233"},
		{"a t.me link", "https://t.me/+79161112233", "https://t.me/+7***2233"},
		{"text around it", "Перезвоните мне: 8 (916) 111-22-33, после 18:00", "Перезвоните мне: ***2233, после 18:00"},
		{"after a label and a dot", "тел.89161112244", "тел.***2244"},
		{"two numbers in one string", "+79161112233 или 8-916-111-22-44", "+7***2233 или ***2244"},
		{"two numbers separated by a comma", "89161112233,89161112244", "***2233,***2244"},
		{"a number in parentheses", "(89161112244)", "(***2244)"},
		{"a number in a JSON string", `{"text":"звоните 89161112244"}`, `{"text":"звоните ***2244"}`},
		{"a number under a phone key", `"phone=89161112244"`, `"phone=***2244"`},
		{"a card-like run of 16 digits in groups", "4276 1234 5678 9012", "***9012"},

		// Not phones: left as they are.
		{"an RFC 3339 time", "2026-12-01T09:46:45.607921021Z", ""},
		{"a date and a time", "2026-12-01 09:46:45", ""},
		{"a Russian date and time", "01.12.2026 09:46", ""},
		{"Go's time format", "2026-12-01 09:46:45.607921021 +0000 UTC", ""},
		{"a UUID", "cccccccc-0000-4000-8000-00000000000c", ""},
		{"a UUID with a long digit group", "123e4567-e89b-12d3-a456-426614174000", ""},
		{"an all-digit UUID", "11111111-1111-1111-1111-111111111111", ""},
		{"a decimal amount", "12345678.90", ""},
		{"a sum with a currency", "итого 1234567890.50 ₽", ""},
		{"a chat id in JSON", `{"chat_id":5550001001,"text":"hi"}`, ""},
		{"a Telegram id in a JSON string under an id key", `{"telegramId":"5550001001"}`, ""},
		{"an id as key=value", "user_id=5550001001 outcome=sent", ""},
		{"a bot path with its token", "/bot8100000001:<token>/sendMessage", ""},
		{"a bot token", "bot8100000001:AAH7x", ""},
		{"a hash", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", ""},
		{"a snowflake id of 19 digits", "1736942400000123456", ""},
		{"a short number", "code 123-45-67", ""},
		{"an IP address and port", "dial tcp 127.0.0.1:8080", ""},
		{"an outbox id and a duration", "event 12345 took 1097755294ns", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if got := mask.Phones(tc.in); got != want {
				t.Errorf("Phones(%q) = %q, want %q", tc.in, got, want)
			}
		})
	}

	t.Run("a masked number shows nothing of the number but its last four digits", func(t *testing.T) {
		t.Parallel()
		for _, phone := range []string{"89161112244", "8 (916) 111-22-33", "+7 999 123-45-67", "916.111.22.33", "+44 20 7946 0958"} {
			got := mask.Phones("call " + phone + " now")
			d := digitsOf(phone)
			if shown := digitsOf(got); shown != d[len(d)-4:] && shown != d[:1]+d[len(d)-4:] {
				t.Errorf("Phones(%q) = %q shows the digits %s", phone, got, shown)
			}
			if strings.HasPrefix(phone, "8") && strings.Contains(got, "+8") {
				t.Errorf("Phones(%q) = %q presents the trunk prefix as a country code", phone, got)
			}
		}
	})
	t.Run("masking twice changes nothing", func(t *testing.T) {
		t.Parallel()
		in := "+79161112233 и 8 (916) 111-22-44"
		if once, twice := mask.Phones(in), mask.Phones(mask.Phones(in)); once != twice {
			t.Errorf("Phones once %q, twice %q", once, twice)
		}
	})
}

func TestPhone(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"+79991231234":       "+7***1234",
		"+7 (999) 555-66-77": "+7***6677",
		"8 (999) 123-12-34":  "***1234",
		"89161112244":        "***2244",
		"123-45-67":          "***4567",
		"12345":              "***",
		"+7***1234":          "+7***1234",
		"***1234":            "***1234",
		"":                   "",
		"  ":                 "",
		"n/a":                "n/a",
	} {
		if got := mask.Phone(in); got != want {
			t.Errorf("Phone(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, in, want string }{
		{"phone", "89161112244", "***2244"},
		{"PhoneNumber", "123-45-67", "***4567"},
		{"chat_id", "5550001001", "5550001001"},
		{"telegramId", "5550001001", "5550001001"},
		{"UserId", "-1005550001001", "-1005550001001"},
		{"uid", "89161112244", "89161112244"},
		{"chat_id", "+79161112233", "+7***2233"}, // not a plain number: a phone in the wrong field
		{"text", "мой номер 89161112244", "мой номер ***2244"},
		{"paid", "89161112244", "***2244"}, // not an id, though it ends in "id"
		{"valid", "true", "true"},
	} {
		if got := mask.Field(tc.key, tc.in); got != tc.want {
			t.Errorf("Field(%q, %q) = %q, want %q", tc.key, tc.in, got, tc.want)
		}
	}
}

func TestNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, in, want string }{
		{"contact", "89161112244", "***2244"},
		{"PhoneNumber", "9161112233", "***2233"},
		{"chat_id", "89161112244", "89161112244"},
		{"id", "-1001234567890", "-1001234567890"},
		{"date", "1736942400", "1736942400"}, // a Unix time in seconds
		{"days", "30", "30"},
		{"amount", "12345678.90", "12345678.90"},
	} {
		if got := mask.Number(tc.key, tc.in); got != tc.want {
			t.Errorf("Number(%q, %s) = %q, want %q", tc.key, tc.in, got, tc.want)
		}
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(mask.NewHandler(slog.NewJSONHandler(&buf, nil))).With(slog.String("caller", "89161112200"))
	log.Info("customer 89161112201 wrote",
		slog.String("path", "/admin/api/referral/replicas/89161112202"),
		slog.String("phone", "8 (916) 111-22-03"),
		slog.Any("err", errors.New("send to 89161112204: blocked")),
		slog.Any("who", stringer("+79161112205")),
		slog.Group("req", slog.String("text", "тел. 8-916-111-22-06")),
		slog.Int64("chat_id", 89161112207),
		slog.String("user_id", "5550001001"),
	)
	out := buf.String()
	for i := range 7 {
		if d := "891611122" + string(rune('0'+i/10)) + string(rune('0'+i%10)); strings.Contains(digitsOf(out), d[1:]) {
			t.Errorf("the log shows the number ending in %s: %s", d[len(d)-2:], out)
		}
	}
	for _, want := range []string{`"msg":"customer ***2201 wrote"`, `"caller":"***2200"`, `"path":"/admin/api/referral/replicas/***2202"`,
		`"phone":"***2203"`, `"err":"send to ***2204: blocked"`, `"who":"+7***2205"`, `"req":{"text":"тел. ***2206"}`,
		`"chat_id":89161112207`, `"user_id":"5550001001"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s: %s", want, out)
		}
	}
}

func FuzzPhones(f *testing.F) {
	for _, s := range []string{"+7 999 123-45-67", "8 (916) 111-22-33", "(89161112244)", "2026-12-01 09:46:45", "a716-446655440000", `"chat_id":5550001001`, "+(", "(", "+", "12345678.90"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := mask.Phones(s)
		if countDigits(out) > countDigits(s) {
			t.Fatalf("Phones(%q) = %q has more digits than its input", s, out)
		}
		if strings.Count(out, "***") < strings.Count(s, "***") {
			t.Fatalf("Phones(%q) = %q lost text", s, out)
		}
	})
}

func countDigits(s string) int { return len(digitsOf(s)) }

// BenchmarkHandler is the cost of masking a typical access-log line, against
// the same line without mask.
func BenchmarkHandler(b *testing.B) {
	for _, bc := range []struct {
		name string
		h    func() slog.Handler
	}{
		{"json", func() slog.Handler { return slog.NewJSONHandler(io.Discard, nil) }},
		{"json+mask", func() slog.Handler { return mask.NewHandler(slog.NewJSONHandler(io.Discard, nil)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			log := slog.New(bc.h()).With(slog.String("request_id", "9ebdf2011becd058"))
			b.ReportAllocs()
			for b.Loop() {
				log.Info("http", slog.String("method", "POST"), slog.String("path", "/webhooks/telegram"),
					slog.String("route", "/webhooks/telegram"), slog.Int("status", 200), slog.Int("bytes", 11),
					slog.Duration("duration", 4314471))
			}
		})
	}
}
