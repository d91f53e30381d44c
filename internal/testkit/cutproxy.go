package testkit

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// CutProxy is a loopback TCP proxy that forwards every connection to a
// target and, once armed, cuts one connection at the moment a trigger
// names: it closes both sides without forwarding the bytes that fired it.
// Tests put it between a client and the service (an answer the service
// wrote never arrives) or between a store and its database (a COMMIT the
// server ran whose answer never arrives).
type CutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	trigger Trigger
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	cuts    atomic.Int64
}

// Trigger looks at the bytes about to be forwarded (toServer: from the
// client to the target; window: the chunk, from window[fresh:], with the
// previous chunk's last bytes before it, so a pattern split across reads
// is still seen) and reports whether to cut the connection instead.
type Trigger func(toServer bool, window []byte, fresh int) bool

// StartCutProxy listens on 127.0.0.1:0, forwards to target and stops when
// the test ends.
func StartCutProxy(tb testing.TB, target string) *CutProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("cut proxy: %v", err)
	}
	p := &CutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the next chunk, in either direction on any connection, for
// which t reports true cut its connection; the proxy disarms itself then.
// Arm(nil) disarms.
func (p *CutProxy) Arm(t Trigger) {
	p.mu.Lock()
	p.trigger = t
	p.mu.Unlock()
}

// Cuts is how many connections a trigger cut.
func (p *CutProxy) Cuts() int { return int(p.cuts.Load()) }

// ContainsTrigger fires on the first chunk in direction toServer that
// holds pattern, or its end.
func ContainsTrigger(toServer bool, pattern []byte) Trigger {
	return func(up bool, window []byte, fresh int) bool {
		if up != toServer {
			return false
		}
		for off := 0; ; {
			i := bytes.Index(window[off:], pattern)
			if i < 0 {
				return false
			}
			if off+i+len(pattern) > fresh {
				return true
			}
			off += i + 1
		}
	}
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *CutProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *CutProxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *CutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		var once sync.Once
		cut := func() {
			once.Do(func() {
				_ = client.Close()
				_ = server.Close()
				p.track(client, false)
				p.track(server, false)
			})
		}
		p.wg.Add(2)
		go p.pipe(client, server, true, cut)
		go p.pipe(server, client, false, cut)
	}
}

// pipe copies src to dst, asking the armed trigger about each chunk.
func (p *CutProxy) pipe(src, dst net.Conn, toServer bool, cut func()) {
	defer p.wg.Done()
	defer cut()
	const keep = 64
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := src.Read(buf)
		if n > 0 {
			window := append(tail, buf[:n]...)
			if p.fire(toServer, window, len(tail)) {
				p.cuts.Add(1)
				return
			}
			tail = append([]byte(nil), window[max(0, len(window)-keep):]...)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed side: cut closes the other
		}
	}
}

func (p *CutProxy) fire(toServer bool, window []byte, fresh int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trigger == nil || !p.trigger(toServer, window, fresh) {
		return false
	}
	p.trigger = nil
	return true
}
