// Package connlimit caps how many connections an HTTP server keeps open, so
// that a flood of connections meets a queue instead of the process's
// open-file limit ("accept: too many open files", which also starves the
// database and outgoing calls of descriptors).
//
// At the cap, Accept waits, and new connections queue in the kernel's
// backlog, as with golang.org/x/net/netutil.LimitListener — with one
// difference: a keep-alive connection idle between requests does not hold
// its place. When a new connection waits, the connection idle longest is
// closed to make room (what the server does anyway after its IdleTimeout;
// an HTTP client opens a new connection for its next request). The cap is
// therefore held only by connections in the middle of a request, and those
// the server's ReadHeaderTimeout, ReadTimeout and WriteTimeout bound.
//
// Wire it with the server's ConnState hook, which tells it which
// connections are idle:
//
//	ln := connlimit.New(inner, 1024)
//	srv := &http.Server{ConnState: ln.ConnState}
//	srv.Serve(ln)
package connlimit

import (
	"container/list"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	metricOpen = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_http_connections",
		Help: "HTTP connections open (at most --max-connections).",
	})
	metricWaits = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_http_connection_waits_total",
		Help: "Connections that waited for a place under --max-connections.",
	})
	metricReclaimed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_http_connections_reclaimed_total",
		Help: "Idle keep-alive connections closed to make room under --max-connections.",
	})
)

// Listener is a net.Listener with at most max connections open.
type Listener struct {
	net.Listener
	max int

	mu      sync.Mutex
	open    int
	waiting int
	idle    *list.List    // of *conn, longest idle first
	changed chan struct{} // closed and replaced when a place may have come free
	done    chan struct{}
	close   sync.Once
}

// New wraps inner so that at most max of its connections are open. A max
// below one is a wiring mistake and panics.
func New(inner net.Listener, max int) *Listener {
	if max < 1 {
		panic("connlimit: max must be at least 1")
	}
	return &Listener{Listener: inner, max: max, idle: list.New(), changed: make(chan struct{}), done: make(chan struct{})}
}

// Accept waits for a place under the cap, then for a connection.
func (l *Listener) Accept() (net.Conn, error) {
	if err := l.acquire(); err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release(nil)
		return nil, err
	}
	metricOpen.Inc()
	return &conn{Conn: c, l: l}, nil
}

// acquire takes a place, closing the longest-idle connection when there is
// none and waiting when no connection is idle.
func (l *Listener) acquire() error {
	counted := false
	defer func() {
		if counted {
			l.mu.Lock()
			l.waiting--
			l.mu.Unlock()
		}
	}()
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return nil
		}
		if !counted {
			counted = true
			l.waiting++
			metricWaits.Inc()
		}
		var victim *conn
		if front := l.idle.Front(); front != nil {
			victim = front.Value.(*conn)
			l.idle.Remove(front)
			victim.idleAt = nil
		}
		changed := l.changed
		l.mu.Unlock()
		if victim != nil {
			metricReclaimed.Inc()
			_ = victim.Close()
			continue
		}
		select {
		case <-changed:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// release gives back c's place (nil: a place taken for an Accept that failed).
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c != nil && c.idleAt != nil {
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
	l.open--
	l.signal()
}

// signal wakes a waiting Accept; call with l.mu held.
func (l *Listener) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// ConnState is the http.Server's ConnState hook: it keeps the list of
// connections idle between requests, the ones a waiting Accept may close.
func (l *Listener) ConnState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.idleAt != nil {
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
	if st == http.StateIdle && !c.closed {
		c.idleAt = l.idle.PushBack(c)
		l.signal()
	}
}

// Close stops Accept, a waiting one too, and closes the inner listener.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Open is how many connections are open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Waiting is how many Accept calls wait for a place now.
func (l *Listener) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// conn gives its place back when closed, once.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
	// idleAt is conn's element in l.idle while it is idle; closed is set at
	// Close. Both are guarded by l.mu.
	idleAt *list.Element
	closed bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		c.l.mu.Unlock()
		metricOpen.Dec()
		c.l.release(c)
	})
	return err
}

// CloseWrite and ReadFrom pass through what net/http looks for on a TCP
// connection: the half-close of a graceful close, and sendfile.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *conn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }
