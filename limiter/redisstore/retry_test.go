package redisstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/internal/redistest"
	"github.com/costguard/costguard/limiter"
	"github.com/costguard/costguard/limiter/redisstore"
)

// TestNoDoubleDebitOnReadTimeout: the script runs in Redis but its reply
// never arrives, so the client times out. go-redis would resend a command
// after a read timeout (MaxRetries 3 here), running the script again on a
// fresh connection; the store's commands are never resent: the caller gets
// the timeout, and the debit happened once.
func TestNoDoubleDebitOnReadTimeout(t *testing.T) {
	srv := redistest.StartServer(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	l := limiter.Limit{Algorithm: limiter.TokenBucket, Burst: 10, Rate: 1, Period: time.Hour}
	for _, tc := range []struct {
		name string
		cfg  redisstore.Config
	}{
		{"coalesced", redisstore.Config{}},
		{"uncoalesced", redisstore.Config{DisableCoalescing: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{
				Addr:            p.addr(),
				MaxRetries:      3,
				MinRetryBackoff: time.Millisecond,
				MaxRetryBackoff: time.Millisecond,
				ReadTimeout:     200 * time.Millisecond,
				PoolSize:        1,
			})
			t.Cleanup(func() { _ = rdb.Close() })
			tc.cfg.Prefix = uniquePrefix(t)
			s, err := redisstore.New(rdb, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			if _, err := s.Take(ctx, "k", l, 0); err != nil { // connects, caches the script
				t.Fatal(err)
			}

			before := scriptCalls(t, ctx, []*redis.Client{direct})
			p.mute() // replies on the open connection are lost from now on
			d, err := s.Take(ctx, "k", l, 3)
			var netErr net.Error
			if !errors.As(err, &netErr) || !netErr.Timeout() || d.Allowed {
				t.Fatalf("Take with its reply lost: %+v, %v; want a timeout", d, err)
			}
			if n := scriptCalls(t, ctx, []*redis.Client{direct}) - before; n != 1 {
				t.Fatalf("the script ran %d times, want once", n)
			}
			peek, err := redisstore.New(direct, redisstore.Config{Prefix: tc.cfg.Prefix, DisableCoalescing: true})
			if err != nil {
				t.Fatal(err)
			}
			if d, err := peek.Take(ctx, "k", l, 0); err != nil || d.Remaining != 7 {
				t.Fatalf("peek: %+v, %v; want the cost of 3 debited once", d, err)
			}
		})
	}
}

// proxy forwards TCP connections to a Redis server and can stop passing
// the replies of the connections open so far.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*proxyConn
	wg     sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	muted          atomic.Bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Go(func() {
			_, _ = io.Copy(server, client)
			_ = server.Close()
		})
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				if n > 0 && !c.muted.Load() {
					if _, werr := client.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = client.Close()
		})
	}
}

// mute drops, from now on, every reply on the connections already open.
func (p *proxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.muted.Store(true)
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
