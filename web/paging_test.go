package web

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestWindows(t *testing.T) {
	t.Parallel()
	rows := []int{9, 8, 7, 6}

	t.Run("the first window shows the newest rows and links to older ones", func(t *testing.T) {
		shown, newer, older := fitWindow(rows, 3, window{})
		if !slices.Equal(shown, []int{9, 8, 7}) || newer || !older {
			t.Fatalf("got %v newer=%v older=%v", shown, newer, older)
		}
	})
	t.Run("an older window has a newer one and an older one only when more came back", func(t *testing.T) {
		shown, newer, older := fitWindow(rows[:2], 3, window{Before: "10"})
		if !slices.Equal(shown, []int{9, 8}) || !newer || older {
			t.Fatalf("got %v newer=%v older=%v", shown, newer, older)
		}
	})
	t.Run("a newer window comes back nearest the key first and is shown in the list's order", func(t *testing.T) {
		// The owner returns rows newer than 5 ascending: 6, 7, 8, 9.
		shown, newer, older := fitWindow([]int{6, 7, 8, 9}, 3, window{After: "5"})
		if !slices.Equal(shown, []int{8, 7, 6}) || !newer || !older {
			t.Fatalf("got %v newer=%v older=%v", shown, newer, older)
		}
		shown, newer, _ = fitWindow([]int{6, 7}, 3, window{After: "5"})
		if !slices.Equal(shown, []int{7, 6}) || newer {
			t.Fatalf("got %v newer=%v", shown, newer)
		}
	})
	t.Run("the window is read from the URL, before winning over after, long keys ignored", func(t *testing.T) {
		w := windowOf(httptest.NewRequest("GET", "/admin/x?before=5&after=7", nil))
		if w.Before != "5" || w.After != "" {
			t.Fatalf("got %+v", w)
		}
		w = windowOf(httptest.NewRequest("GET", "/admin/x?after="+strings.Repeat("1", maxKeyLen+1), nil))
		if !w.First() {
			t.Fatalf("got %+v", w)
		}
	})
}

func TestPager(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/admin/queues/q?state=dead&before=90&q=x", nil)
	p := newPager(listBase(r), 50, true, true, "89", "40", "dead letters")
	if got, want := p.Newer, "/admin/queues/q?after=89&q=x&state=dead"; got != want {
		t.Errorf("newer = %q, want %q", got, want)
	}
	if got, want := p.Older, "/admin/queues/q?before=40&q=x&state=dead"; got != want {
		t.Errorf("older = %q, want %q", got, want)
	}
	if got, want := p.First, "/admin/queues/q?q=x&state=dead"; got != want {
		t.Errorf("first = %q, want %q", got, want)
	}
	p.Total, p.Offset = 10000, 50
	if got, want := p.Position(), "51–100 of 10000 dead letters"; got != want {
		t.Errorf("position = %q, want %q", got, want)
	}
	p.Offset = -1
	if got, want := p.Position(), "50 of 10000 dead letters"; got != want {
		t.Errorf("position = %q, want %q", got, want)
	}
	last := newPager(url.URL{Path: "/admin/x"}, 0, false, false, "", "", "threads")
	if last.Paged() || last.Position() != "none threads" {
		t.Errorf("empty list: paged=%v position=%q", last.Paged(), last.Position())
	}
}

func TestBulkScope(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/admin/x", strings.NewReader("id=a&id=b&id=a&id=+"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := r.ParseForm(); err != nil {
		t.Fatal(err)
	}
	ids, all, ok := bulkScope(r)
	if !ok || all || len(ids) != 2 || ids[0] != "a" || ids[1] != "b" {
		t.Fatalf("got %v all=%v ok=%v", ids, all, ok)
	}
	r = httptest.NewRequest("POST", "/admin/x", strings.NewReader("scope=chosen"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_ = r.ParseForm()
	if _, _, ok := bulkScope(r); ok {
		t.Fatal("nothing chosen is not a scope")
	}
}
