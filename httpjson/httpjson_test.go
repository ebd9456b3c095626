package httpjson_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/httpjson"
	"switchyard/httpjson/httpjsontest"
	"switchyard/store"
)

func TestTimeLayoutIsTheStores(t *testing.T) {
	t.Parallel()
	if httpjson.TimeLayout != store.TimeLayout {
		t.Fatalf("httpjson.TimeLayout %q, store.TimeLayout %q: an answer would not write times as they are stored",
			httpjson.TimeLayout, store.TimeLayout)
	}
}

func TestWriteTimes(t *testing.T) {
	t.Parallel()
	moscow := time.FixedZone("MSK", 3*60*60)
	nanos := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	whole := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	type inner struct {
		At time.Time `json:"at"`
	}
	type body struct {
		Plain     time.Time      `json:"plain"`
		Whole     time.Time      `json:"whole"`
		Zoned     time.Time      `json:"zoned"`
		Pointer   *time.Time     `json:"pointer"`
		Nil       *time.Time     `json:"nil"`
		Omitted   *time.Time     `json:"omitted,omitempty"`
		Any       any            `json:"any"`
		Map       map[string]any `json:"map"`
		Slice     []time.Time    `json:"slice"`
		Nested    inner          `json:"nested"`
		NestedPtr *inner         `json:"nestedPtr"`
	}
	v := body{
		Plain: nanos, Whole: whole, Zoned: whole.In(moscow), Pointer: &nanos,
		Any: nanos, Map: map[string]any{"t": &whole}, Slice: []time.Time{nanos, whole},
		Nested: inner{At: nanos}, NestedPtr: &inner{At: whole},
	}
	rec := httptest.NewRecorder()
	httpjson.Write(rec, http.StatusOK, v)
	const (
		wantNanos = `"2026-03-04T05:06:07.123456Z"`
		wantWhole = `"2026-03-04T05:06:07.000000Z"`
	)
	want := `{"plain":` + wantNanos + `,"whole":` + wantWhole + `,"zoned":` + wantWhole + `,"pointer":` + wantNanos +
		`,"nil":null,"any":` + wantNanos + `,"map":{"t":` + wantWhole + `},"slice":[` + wantNanos + `,` + wantWhole +
		`],"nested":{"at":` + wantNanos + `},"nestedPtr":{"at":` + wantWhole + `}}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("times written as\n%s\nwant\n%s", got, want)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
}

// v1Parity are values without times whose JSON must be what encoding/json
// (with SetEscapeHTML(false)) writes: Write changed how times look, nothing
// else.
func TestWriteKeepsEncodingJSONSemantics(t *testing.T) {
	t.Parallel()
	type Embedded struct {
		E string `json:"e"`
	}
	type withMethods struct {
		Embedded
		Raw       json.RawMessage   `json:"raw"`
		RawNil    json.RawMessage   `json:"rawNil"`
		Bytes     []byte            `json:"bytes"`
		NilSlice  []int             `json:"nilSlice"`
		NilMap    map[string]int    `json:"nilMap"`
		Empty     string            `json:"empty,omitempty"`
		Zero      int               `json:"zero,omitempty"`
		AsString  int64             `json:"asString,string"`
		Map       map[string]string `json:"map"`
		IntKeys   map[int]bool      `json:"intKeys"`
		HTML      string            `json:"html"`
		Separator string            `json:"separator"`
		Skipped   string            `json:"-"`
		unexposed string
		Float     float64 `json:"float"`
		Untagged  bool
	}
	values := []any{
		nil,
		map[string]bool{"ok": true},
		[]string{},
		withMethods{
			Embedded: Embedded{E: "embedded"},
			Raw:      json.RawMessage(`{ "spaced" : [1, 2] }`),
			Bytes:    []byte("bytes"),
			AsString: 1 << 60,
			Map:      map[string]string{"b": "2", "a": "1"},
			IntKeys:  map[int]bool{10: true, 2: false},
			HTML:     "<a href=\"x\">&</a>",
			// U+2028 and U+2029 stay escaped, as encoding/json escapes them.
			Separator: "line\u2028para\u2029",
			unexposed: "x",
			Float:     1e21,
		},
		&httpjson.Error{Status: 400, Code: "c", Message: "m"},
	}
	for _, v := range values {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		httpjson.Write(rec, http.StatusOK, v)
		if got := rec.Body.String(); got != want.String() {
			t.Errorf("%T written as\n%s\nencoding/json writes\n%s", v, got, want.String())
		}
	}
}

func TestWriteAnUnencodableValueIsA500(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	httpjson.Write(rec, http.StatusOK, map[string]any{"f": func() {}})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"internal"`) {
		t.Fatalf("status %d body %s", rec.Code, rec.Body)
	}
}

func TestRequireJSON(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		header []string // nil: no Content-Type
		ok     bool
	}{
		{"application/json is accepted", []string{"application/json"}, true},
		{"charset=utf-8 is accepted", []string{"application/json; charset=utf-8"}, true},
		{"the media type and charset are case-insensitive", []string{"Application/JSON; Charset=UTF-8"}, true},
		{"a missing Content-Type is refused", nil, false},
		{"an empty Content-Type is refused", []string{""}, false},
		{"text/plain is refused", []string{"text/plain"}, false},
		{"a form is refused", []string{"application/x-www-form-urlencoded"}, false},
		{"multipart is refused", []string{"multipart/form-data; boundary=x"}, false},
		{"a +json suffix is refused", []string{"application/problem+json"}, false},
		{"another parameter changes nothing (RFC 8259 defines none)", []string{"application/json; v=2"}, true},
		{"a malformed header is refused", []string{"application/json; charset"}, false},
		{"two Content-Type headers are refused", []string{"application/json", "text/plain"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"name":"x"}`))
			for _, h := range c.header {
				r.Header.Add("Content-Type", h)
			}
			var v struct {
				Name string `json:"name"`
			}
			err := httpjson.Decode(r, &v)
			if c.ok {
				if err != nil || v.Name != "x" {
					t.Fatalf("Decode: %v (%+v)", err, v)
				}
				return
			}
			rec := httptest.NewRecorder()
			httpjson.WriteError(rec, r, err)
			if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(rec.Body.String(), `"code":"unsupported_media_type"`) {
				t.Fatalf("status %d body %s, want 415 unsupported_media_type", rec.Code, rec.Body)
			}
			if v.Name != "" {
				t.Fatal("the body was decoded anyway")
			}
		})
	}
}

func TestBadTimesFindsTimesInAnotherFormat(t *testing.T) {
	t.Parallel()
	body := []byte(`{"ok":"2026-01-15T12:00:00.000000Z","list":[{"short":"2026-01-15T12:00:00Z"}],` +
		`"nanos":"2026-01-15T12:00:00.123456789Z","zoned":"2026-01-15T15:00:00.000000+03:00","text":"not a time","n":1}`)
	bad, err := httpjsontest.BadTimes(body)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(bad)
	want := []string{`$.list[0].short = "2026-01-15T12:00:00Z"`, `$.nanos = "2026-01-15T12:00:00.123456789Z"`, `$.zoned = "2026-01-15T15:00:00.000000+03:00"`}
	if !slices.Equal(bad, want) {
		t.Fatalf("bad times %q, want %q", bad, want)
	}
	if n := httpjsontest.Times(body); n != 1 {
		t.Fatalf("%d good times, want 1", n)
	}
}
