package history

import (
	"testing"
	"time"
)

func TestTermRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		term        string
		trace, uuid bool
		number      int64
		isNumber    bool
		searchable  bool
	}{
		{term: "4bf92f3577b34da6a3ce929d0e0e4736", trace: true, searchable: true},
		{term: "4BF92F3577B34DA6A3CE929D0E0E4736", searchable: true},
		{term: "00000000000000000000000000000000", searchable: true},
		{term: "4bf92f3577b34da6a3ce929d0e0e473", searchable: true},
		{term: "6f1c1a52-0000-4000-8000-000000000001", uuid: true, searchable: true},
		{term: "5571234", number: 5571234, isNumber: true, searchable: true},
		{term: "-5", searchable: true},
		{term: "0", searchable: true},
		{term: "+79991234567", searchable: true},
		{term: "99999999999999999999", searchable: true},
		{term: "telegram:1:2", searchable: true},
		{term: ""},
	} {
		n, ok := Number(tt.term)
		if IsTraceID(tt.term) != tt.trace || IsUUID(tt.term) != tt.uuid || n != tt.number || ok != tt.isNumber ||
			Searchable(tt.term) != tt.searchable {
			t.Errorf("%q: trace %v, uuid %v, number %d %v, searchable %v", tt.term, IsTraceID(tt.term), IsUUID(tt.term), n, ok, Searchable(tt.term))
		}
	}
	if Searchable(string(make([]byte, 201))) || Term("  42 \n") != "42" {
		t.Error("a long term is searchable, or a term is not trimmed")
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"": "",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": "",
		"garbage": "",
	} {
		if got := TraceID(tp); got != want {
			t.Errorf("TraceID(%q) = %q, want %q", tp, got, want)
		}
	}
}

func TestFoundAndSort(t *testing.T) {
	t.Parallel()
	var f Found
	f.Add(3, 2, Item{Kind: "a"}, Item{Kind: "b"})
	if f.Cut || len(f.Items) != 2 {
		t.Fatalf("%+v", f)
	}
	f.Add(3, 3)
	if !f.Cut {
		t.Fatal("a query that returned its limit is not a cut")
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	items := []Item{{At: t0.Add(2), Kind: "late"}, {At: t0, Kind: "first"}, {At: t0, Kind: "second"}}
	Sort(items)
	if items[0].Kind != "first" || items[1].Kind != "second" || items[2].Kind != "late" {
		t.Fatalf("sorted %+v", items)
	}
}
