package store_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"switchyard/store/storetest"
)

type extKey struct{}

// closer counts its Close calls.
type closer struct{ closed atomic.Int32 }

func (c *closer) Close() error { c.closed.Add(1); return nil }

func TestExt(t *testing.T) {
	t.Parallel()

	t.Run("every caller gets the one value made for the key", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		var (
			mu   sync.Mutex
			made []*closer
		)
		newFunc := func() any {
			c := new(closer)
			mu.Lock()
			made = append(made, c)
			mu.Unlock()
			return c
		}
		got := make([]any, 50)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i] = db.Ext(extKey{}, newFunc) })
		}
		wg.Wait()
		for i, v := range got {
			if v != got[0] {
				t.Fatalf("caller %d got another value", i)
			}
		}
		// Racing first calls may each make one: all but the kept one are closed.
		for _, c := range made {
			if want := int32(1); c != got[0] && c.closed.Load() != want {
				t.Fatalf("a value not kept was closed %d times, want once", c.closed.Load())
			}
		}
		if got[0].(*closer).closed.Load() != 0 {
			t.Fatal("the kept value was closed")
		}
	})

	t.Run("closing the database closes and drops its values", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		c := db.Ext(extKey{}, func() any { return new(closer) }).(*closer)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if n := c.closed.Load(); n != 1 {
			t.Fatalf("closed %d times, want once", n)
		}
		if again := db.Ext(extKey{}, func() any { return new(closer) }); again == c {
			t.Fatal("the value outlived its database")
		}
	})
}
