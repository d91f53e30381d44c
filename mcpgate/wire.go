package mcpgate

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// wireTransport counts the client's calls between the moment they are read
// and the moment their answers are written, which is what drain waits for.
type wireTransport struct {
	mcp.Transport
	g *Gate
}

func (t *wireTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &wireConn{Connection: c, g: t.g}, nil
}

type wireConn struct {
	mcp.Connection
	g *Gate
}

func (c *wireConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && err == nil && r.IsCall() {
		c.g.unansweredMu.Lock()
		c.g.unanswered++
		c.g.unansweredMu.Unlock()
	}
	return m, err
}

func (c *wireConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if _, ok := m.(*jsonrpc.Response); ok {
		c.g.unansweredMu.Lock()
		if c.g.unanswered > 0 {
			if c.g.unanswered--; c.g.unanswered == 0 {
				close(c.g.answered)
				c.g.answered = make(chan struct{})
			}
		}
		c.g.unansweredMu.Unlock()
	}
	return err
}

// drain waits until every call read is answered, at most max (a cancelled
// call may never be answered) or until ctx ends.
func (g *Gate) drain(ctx context.Context, max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	for {
		g.unansweredMu.Lock()
		n, answered := g.unanswered, g.answered
		g.unansweredMu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-answered:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
