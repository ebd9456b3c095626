package loadtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// RoundRobin is a client-side load balancer over the instances of one
// deployment, an http.RoundTripper: requests are made to the first base URL,
// and each goes to the next instance in turn, with the first base URL's
// prefix replaced by that instance's. A request that cannot connect to its
// instance (nothing was sent, so nothing can have taken effect) is tried on
// the next one, as a load balancer does when an instance is down; any other
// error, a broken connection included, is the caller's, since the request may
// have been applied.
type RoundRobin struct {
	bases []*url.URL
	next  atomic.Uint64
	rt    http.RoundTripper
}

// NewRoundRobin balances over bases (at least one, each an http or https
// URL) through rt (http.DefaultTransport when nil).
func NewRoundRobin(bases []string, rt http.RoundTripper) (*RoundRobin, error) {
	if len(bases) == 0 {
		return nil, errors.New("loadtest: no base URL to balance over")
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	r := &RoundRobin{rt: rt}
	for _, b := range bases {
		u, err := url.Parse(strings.TrimRight(b, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("loadtest: base URL %q is not an http(s) URL", b)
		}
		r.bases = append(r.bases, u)
	}
	return r, nil
}

// Base is the URL requests are made to: the first base URL.
func (r *RoundRobin) Base() string { return r.bases[0].String() }

// RoundTrip sends req to the next instance, or to the ones after it while
// an instance refuses the connection.
func (r *RoundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	first := r.next.Add(1) - 1
	var err error
	for i := range len(r.bases) {
		out := req.Clone(req.Context())
		out.URL = r.rebase(req.URL, r.bases[(first+uint64(i))%uint64(len(r.bases))])
		out.Host = ""
		if i > 0 && req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err // the body went with the first try
			}
			if out.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		var resp *http.Response
		resp, err = r.rt.RoundTrip(out)
		if err == nil || !refused(err) {
			return resp, err
		}
	}
	return nil, err
}

// rebase is u with the first base URL's scheme, host and path prefix
// replaced by b's.
func (r *RoundRobin) rebase(u *url.URL, b *url.URL) *url.URL {
	out := *u
	out.Scheme, out.Host = b.Scheme, b.Host
	if rest, ok := strings.CutPrefix(u.Path, r.bases[0].Path); ok {
		out.Path = b.Path + rest
		out.RawPath = ""
	}
	return &out
}

// refused reports whether err is a failure to connect: nothing was sent.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
