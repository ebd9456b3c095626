package webtest_test

import (
	"net/http"
	"testing"

	"switchyard/store/storetest"
	"switchyard/web/webtest"
)

func TestNew(t *testing.T) {
	t.Parallel()
	srv := webtest.New(t, storetest.New(t))

	t.Run("the server answers readiness on its database", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("readyz %d", resp.StatusCode)
		}
	})
	t.Run("a logged-in client opens the console, and an anonymous one is sent to the login", func(t *testing.T) {
		resp, err := srv.Login(t).Get(srv.URL + "/admin/queues")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("with the session: %d", resp.StatusCode)
		}
		anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err = anon.Get(srv.URL + "/admin/queues")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("without a session: %d", resp.StatusCode)
		}
	})
	t.Run("the admin API takes the server's token", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/api/nothing-here", nil)
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("an unknown API path with the token: %d, want 404 (past the auth check)", resp.StatusCode)
		}
	})
}
