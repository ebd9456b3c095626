package connlimit_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"switchyard/connlimit"
	"switchyard/testwait"
)

func listen(t *testing.T, max int) *connlimit.Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(inner, max)
	t.Cleanup(func() { l.Close() })
	return l
}

func TestListener(t *testing.T) {
	t.Parallel()

	t.Run("at the cap a new connection waits until one closes", func(t *testing.T) {
		t.Parallel()
		l := listen(t, 2)
		accepted := make(chan net.Conn, 3)
		// Three Accepts and no more: a fourth would take the place the
		// closes give back, and "every place given back" would hold only
		// until it did.
		go func() {
			for range 3 {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		for range 3 {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		first, second := <-accepted, <-accepted
		testwait.Until(t, 10*time.Second, "the third Accept waits for a place", func() bool { return l.Waiting() == 1 })
		if l.Open() != 2 || len(accepted) != 0 {
			t.Fatalf("%d open, %d more accepted over a cap of 2", l.Open(), len(accepted))
		}
		first.Close()
		select {
		case c := <-accepted:
			c.Close()
		case <-time.After(30 * time.Second):
			t.Fatal("the third connection was not accepted after one closed")
		}
		second.Close()
		testwait.Until(t, 10*time.Second, "every place given back", func() bool { return l.Open() == 0 })
	})

	t.Run("closing the listener ends a waiting Accept", func(t *testing.T) {
		t.Parallel()
		l := listen(t, 1)
		go func() {
			c, err := net.Dial("tcp", l.Addr().String())
			if err == nil {
				t.Cleanup(func() { c.Close() })
			}
		}()
		if _, err := l.Accept(); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 1)
		go func() { _, err := l.Accept(); errs <- err }()
		testwait.Until(t, 10*time.Second, "the second Accept waits", func() bool { return l.Waiting() == 1 })
		l.Close()
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("Accept returned a connection after Close")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Accept still waits after Close")
		}
	})

	t.Run("an idle keep-alive connection makes room for a new client", func(t *testing.T) {
		t.Parallel()
		l := listen(t, 1)
		srv := &http.Server{
			Handler:     http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }),
			IdleTimeout: 10 * time.Minute, // without the reclaim, the second client would wait this long
			ConnState:   l.ConnState,
		}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		url := "http://" + l.Addr().String() + "/"
		get := func(c *http.Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			return err
		}
		keepAlive := &http.Client{Transport: &http.Transport{}}
		if err := get(keepAlive); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the first client's connection is open and idle", func() bool { return l.Open() == 1 })
		other := &http.Client{Transport: &http.Transport{}}
		if err := get(other); err != nil {
			t.Fatalf("a second client at the cap, with the first idle: %v", err)
		}
		// The first client still works: it opens a new connection.
		if err := get(keepAlive); err != nil {
			t.Fatalf("the first client after its idle connection was reclaimed: %v", err)
		}
	})
}
