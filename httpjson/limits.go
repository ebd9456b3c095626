package httpjson

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"
)

// HoldOpen lets a handler that waits on purpose — a long poll — answer up
// to d from now, past the server's WriteTimeout, by moving its connection's
// write deadline. (The ReadTimeout needs no help: net/http lifts the read
// deadline once the request body is read.) Pass the longest the handler may
// wait plus a margin for the answer. A writer without deadlines
// (httptest.ResponseRecorder) is left as it is.
func HoldOpen(w http.ResponseWriter, d time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

// SetRetryAfter sets Retry-After to wait in whole seconds, rounded up and at
// least one, and returns them.
func SetRetryAfter(w http.ResponseWriter, wait time.Duration) int {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}

// TooManyAttempts is the 429 "too_many_attempts" of a client that must wait
// after failed authentication; it sets Retry-After.
func TooManyAttempts(w http.ResponseWriter, wait time.Duration) *Error {
	secs := SetRetryAfter(w, wait)
	return Errorf(http.StatusTooManyRequests, "too_many_attempts",
		"too many failed authentication attempts from this address; retry in %d s", secs)
}

// IsTimeout reports whether err is a connection deadline passing: a request
// body that did not arrive within the server's ReadTimeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// RequestTimeout is the 408 of a request body that did not arrive in time.
func RequestTimeout() *Error {
	return Errorf(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
}
