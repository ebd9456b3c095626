package loadtest_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"switchyard/loadtest"
)

// instance is an httptest server that records what it was asked.
type instance struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "METHOD path body"
}

func newInstance(t *testing.T) *instance {
	in := &instance{}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		in.mu.Lock()
		in.seen = append(in.seen, r.Method+" "+r.URL.Path+" "+string(body))
		in.mu.Unlock()
	}))
	t.Cleanup(in.srv.Close)
	return in
}

func (in *instance) requests() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.seen...)
}

// refusing is an address nothing listens on.
func refusing(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func balanced(t *testing.T, bases ...string) (*loadtest.RoundRobin, *http.Client) {
	t.Helper()
	rr, err := loadtest.NewRoundRobin(bases, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rr, &http.Client{Transport: rr}
}

func post(t *testing.T, hc *http.Client, url, body string) error {
	t.Helper()
	resp, err := hc.Post(url, "text/plain", strings.NewReader(body))
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestRoundRobin(t *testing.T) {
	t.Parallel()
	t.Run("requests go to each instance in turn, under its own path prefix", func(t *testing.T) {
		a, b, c := newInstance(t), newInstance(t), newInstance(t)
		rr, hc := balanced(t, a.srv.URL+"/one/", b.srv.URL+"/two", c.srv.URL)
		if rr.Base() != a.srv.URL+"/one" {
			t.Fatalf("Base() = %q, want the first base URL", rr.Base())
		}
		for i := range 6 {
			if err := post(t, hc, rr.Base()+"/admin/api/x", string(rune('a'+i))); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			in   *instance
			want []string
		}{
			{a, []string{"POST /one/admin/api/x a", "POST /one/admin/api/x d"}},
			{b, []string{"POST /two/admin/api/x b", "POST /two/admin/api/x e"}},
			{c, []string{"POST /admin/api/x c", "POST /admin/api/x f"}},
		} {
			if got := tc.in.requests(); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("an instance got %q, want %q", got, tc.want)
			}
		}
	})
	t.Run("a request an instance refuses to connect goes to the next, body and all", func(t *testing.T) {
		a := newInstance(t)
		rr, hc := balanced(t, refusing(t), a.srv.URL, refusing(t))
		for i := range 3 {
			if err := post(t, hc, rr.Base()+"/p", "body"); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if got := a.requests(); len(got) != 3 || got[0] != "POST /p body" {
			t.Fatalf("the live instance got %q, want three POST /p body", got)
		}
	})
	t.Run("with every instance down the request fails", func(t *testing.T) {
		rr, hc := balanced(t, refusing(t), refusing(t))
		if err := post(t, hc, rr.Base()+"/p", "body"); err == nil {
			t.Fatal("a request with every instance down succeeded")
		}
	})
	t.Run("a connection broken after the request went out is not sent again", func(t *testing.T) {
		broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // the request may have taken effect: no answer
			}
		}))
		t.Cleanup(broken.Close)
		a := newInstance(t)
		rr, hc := balanced(t, broken.URL, a.srv.URL)
		if err := post(t, hc, rr.Base()+"/p", "once"); err == nil {
			t.Fatal("a broken connection was answered")
		}
		if got := a.requests(); len(got) != 0 {
			t.Fatalf("the request was sent again to another instance: %q", got)
		}
	})
	t.Run("a base URL that is not http(s) is refused", func(t *testing.T) {
		for _, bases := range [][]string{nil, {"127.0.0.1:8080"}, {"http://a:1", "ftp://b"}} {
			if _, err := loadtest.NewRoundRobin(bases, nil); err == nil {
				t.Errorf("NewRoundRobin(%q) accepted", bases)
			}
		}
	})
}
