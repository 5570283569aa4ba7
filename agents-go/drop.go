package main

// Cutting an agent's open connections on request (POST /_control/drop), so a test can
// drop a stream the bridge is reading mid-Task and watch it resume by subscribing. The
// cut is a plain TCP close, what a network fault or a restarted proxy does: no SSE
// frame, no gRPC status, nothing the SDK or the bridge is told first.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

type connKey struct{}

// withConn is the HTTP server's ConnContext: each request's context carries its connection.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// cutter holds one agent's connections that can be cut: those of its HTTP requests in
// flight, and every connection to its gRPC port.
type cutter struct {
	mu       sync.Mutex
	inFlight map[*http.Request]net.Conn
	grpc     map[net.Conn]struct{}
	streams  atomic.Int64 // gRPC streams open
}

func newCutter() *cutter {
	return &cutter{inFlight: map[*http.Request]net.Conn{}, grpc: map[net.Conn]struct{}{}}
}

// track wraps the agent's HTTP routes: a request's connection can be cut while it is served.
func (c *cutter) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, ok := r.Context().Value(connKey{}).(net.Conn)
		if ok {
			c.mu.Lock()
			c.inFlight[r] = conn
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.inFlight, r)
				c.mu.Unlock()
			}()
		}
		next.ServeHTTP(w, r)
	})
}

// streamCounter is the gRPC server's stream interceptor: it counts the streams open.
func (c *cutter) streamCounter(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c.streams.Add(1)
	defer c.streams.Add(-1)
	return handler(srv, ss)
}

// cut closes the connections of the HTTP requests in flight and every gRPC connection;
// it says how many requests and gRPC streams were open.
func (c *cutter) cut() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.inFlight) + int(c.streams.Load())
	for _, conn := range c.inFlight {
		_ = conn.Close()
	}
	for conn := range c.grpc {
		_ = conn.Close()
	}
	return n
}

// listener is an agent's gRPC listener, whose connections the cutter knows.
type listener struct {
	net.Listener
	c *cutter
}

func (l listener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.mu.Lock()
	l.c.grpc[conn] = struct{}{}
	l.c.mu.Unlock()
	return &trackedConn{Conn: conn, c: l.c}, nil
}

type trackedConn struct {
	net.Conn
	c    *cutter
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.grpc, t.Conn)
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}

// dropHandler serves POST /_control/drop {"agent": name}: {"dropped": n}, n the
// requests and streams that were open.
func dropHandler(cutters map[string]*cutter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var body struct {
			Agent string `json:"agent"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "want {\"agent\": name}", http.StatusBadRequest)
			return
		}
		c, ok := cutters[body.Agent]
		if !ok {
			http.Error(w, "no agent "+body.Agent, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"dropped": c.cut()})
	})
}
