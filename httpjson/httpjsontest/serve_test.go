package httpjsontest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/httpjson/httpjsontest"
)

// recorder stands in for a test, to see how CheckRefusal fails one.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	if r.failed == "" {
		r.failed = fmt.Sprintf(format, args...)
	}
}

func TestCheckRefusal(t *testing.T) {
	t.Parallel()
	h := httpjsontest.Router(func(r *mux.Router) {
		r.HandleFunc("/refused", func(w http.ResponseWriter, r *http.Request) {
			httpjson.WriteError(w, r, httpjson.Errorf(http.StatusBadRequest, "bad_request", "no"))
		})
		r.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusBadRequest) })
		r.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
		r.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {})
	})
	for _, tc := range []struct {
		path    string
		refused bool
		fails   bool
	}{
		{"/refused", true, false},
		{"/missing", true, false}, // the router's own 404 is the JSON shape too
		{"/plain", false, true},
		{"/broken", false, true},
		{"/ok", false, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			refused := httpjsontest.CheckRefusal(r, tc.path, httpjsontest.Do(h, http.MethodGet, tc.path, "", nil, nil))
			if (r.failed != "") != tc.fails || (!tc.fails && refused != tc.refused) {
				t.Errorf("refused %v, failed %q; want refused %v, failing %v", refused, r.failed, tc.refused, tc.fails)
			}
		})
	}
}
