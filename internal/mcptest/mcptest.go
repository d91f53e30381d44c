package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call is one tools/call the upstream received.
type Call struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
	// Meta is the call's _meta (the gate sends reconciler/idempotency_key
	// and reconciler/metadata_local_id with a write).
	Meta map[string]any `json:"meta,omitempty"`
}

// Key returns the call's idempotency key argument (send_email, slow_email)
// or client_ref (create_ticket).
func (c Call) Key() string {
	for _, name := range []string{"idempotency_key", "client_ref"} {
		if s, ok := c.Args[name].(string); ok {
			return s
		}
	}
	return ""
}

// Log records calls, in memory and, with a path, in a file.
type Log struct {
	path  string
	mu    sync.Mutex
	calls []Call
	// sent maps an email's idempotency key to the email's id.
	sent map[string]string
}

// NewLog returns a log; path "" keeps calls in memory only.
func NewLog(path string) *Log { return &Log{path: path, sent: map[string]string{}} }

// Calls returns the calls recorded so far, in order.
func (l *Log) Calls() []Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Call(nil), l.calls...)
}

// Count returns how many calls of tool were recorded.
func (l *Log) Count(tool string) int { return count(l.Calls(), tool) }

func count(calls []Call, tool string) int {
	n := 0
	for _, c := range calls {
		if c.Tool == tool {
			n++
		}
	}
	return n
}

// record appends one call and returns the email id of its key (a new one
// unless the key was seen).
func (l *Log) record(c Call) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	id, seen := l.sent[c.Key()]
	if !seen {
		id = fmt.Sprintf("em_%d", len(l.sent)+1)
		if k := c.Key(); k != "" {
			l.sent[k] = id
		}
	}
	if l.path == "" {
		return id, nil
	}
	line, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return "", err
	}
	return id, f.Close()
}

// ReadLog returns the calls a child process recorded in path.
func ReadLog(path string) ([]Call, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var calls []Call
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("log line %q: %w", line, err)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// CountIn returns how many calls of tool calls holds.
func CountIn(calls []Call, tool string) int { return count(calls, tool) }

// Schemas of the tools, as an upstream would write them: the key is a
// required argument.
const (
	emailSchema  = `{"type":"object","properties":{"to":{"type":"string"},"subject":{"type":"string"},"text":{"type":"string"},"idempotency_key":{"type":"string","description":"dedupes retries"}},"required":["to","subject","idempotency_key"]}`
	ticketSchema = `{"type":"object","properties":{"title":{"type":"string"},"client_ref":{"type":"string"}},"required":["title","client_ref"]}`
	slowSchema   = `{"type":"object","properties":{"to":{"type":"string"},"idempotency_key":{"type":"string"}},"required":["to"]}`
	rejectSchema = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`
	bigSchema    = `{"type":"object","properties":{"size":{"type":"integer"}},"required":["size"]}`
	getSchema    = `{"type":"object","properties":{"message_id":{"type":"string"}},"required":["message_id"]}`
	failSchema   = `{"type":"object","properties":{"code":{"type":"integer"}},"required":["code"]}`
)

// SlowHold bounds how long slow_email hangs when nobody cancels it.
const SlowHold = time.Minute

// NewServer returns the upstream server, recording to log.
func NewServer(log *Log) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest-upstream", Version: "v1"},
		&mcp.ServerOptions{Instructions: "A mail and ticket service for tests."})
	add := func(name, desc, schema string, h func(context.Context, Call, string) *mcp.CallToolResult) {
		s.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: json.RawMessage(schema)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				c := Call{Tool: name, Meta: req.Params.Meta}
				if len(req.Params.Arguments) > 0 {
					if err := json.Unmarshal(req.Params.Arguments, &c.Args); err != nil {
						return nil, fmt.Errorf("arguments: %w", err)
					}
				}
				id, err := log.record(c)
				if err != nil {
					return nil, err
				}
				return h(ctx, c, id), nil
			})
	}
	add("send_email", "Send an email.", emailSchema, func(_ context.Context, c Call, id string) *mcp.CallToolResult {
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent %s to %v", id, c.Args["to"])}},
			StructuredContent: map[string]any{"id": id, "to": c.Args["to"]},
		}
	})
	add("create_ticket", "Open a ticket.", ticketSchema, func(_ context.Context, c Call, id string) *mcp.CallToolResult {
		return text(fmt.Sprintf("ticket %s: %v", strings.Replace(id, "em_", "tk_", 1), c.Args["title"]))
	})
	add("slow_email", "Send an email slowly.", slowSchema, func(ctx context.Context, _ Call, id string) *mcp.CallToolResult {
		// Committed; the answer never comes in time.
		select {
		case <-ctx.Done():
		case <-time.After(SlowHold):
		}
		return text("sent " + id + " (late)")
	})
	add("reject_email", "Send an email to a bad address.", rejectSchema, func(_ context.Context, c Call, _ string) *mcp.CallToolResult {
		r := text(fmt.Sprintf("invalid recipient %v", c.Args["to"]))
		r.IsError = true
		return r
	})
	add("big_report", "Return a report of size bytes.", bigSchema, func(_ context.Context, c Call, _ string) *mcp.CallToolResult {
		n, _ := c.Args["size"].(float64)
		return text(strings.Repeat("r", int(n)))
	})
	s.AddTool(&mcp.Tool{Name: "fail_email", Description: "Answer with a JSON-RPC error of the given code.", InputSchema: json.RawMessage(failSchema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			c := Call{Tool: "fail_email", Meta: req.Params.Meta}
			if err := json.Unmarshal(req.Params.Arguments, &c.Args); err != nil {
				return nil, fmt.Errorf("arguments: %w", err)
			}
			if _, err := log.record(c); err != nil {
				return nil, err
			}
			code, _ := c.Args["code"].(float64)
			return nil, &jsonrpc.Error{Code: int64(code), Message: fmt.Sprintf("failed with %d", int64(code))}
		})
	add("get_email", "Look an email up.", getSchema, func(_ context.Context, c Call, _ string) *mcp.CallToolResult {
		return text(fmt.Sprintf("email %v: delivered", c.Args["message_id"]))
	})
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// ChildArg is the first argument that makes RunChild serve.
const ChildArg = "mcptest-upstream"

// Command is the command line of the upstream as a child process of the
// running test binary (whose TestMain calls RunChild), recording to
// logPath.
func Command(logPath string) []string { return []string{os.Args[0], ChildArg, logPath} }

// RunChild serves the upstream over stdio and exits when the process was
// started by Command; otherwise it returns at once. A TestMain calls it
// before anything else.
func RunChild() {
	if len(os.Args) < 3 || os.Args[1] != ChildArg {
		return
	}
	err := NewServer(NewLog(os.Args[2])).Run(context.Background(), &mcp.StdioTransport{})
	if err != nil && !strings.Contains(err.Error(), "EOF") {
		fmt.Fprintln(os.Stderr, "mcptest-upstream:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
