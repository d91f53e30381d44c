package mcpgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentledger/reconciler/internal/mcptest"
	"github.com/agentledger/reconciler/internal/testkit"
	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/mcpgate"
)

// schemaOf returns the input schema the gate lists for a tool.
func schemaOf(t *testing.T, s *session, name string) (props map[string]any, required []string) {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name != name {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var sch struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		}
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatal(err)
		}
		return sch.Properties, sch.Required
	}
	t.Fatalf("%s is not listed", name)
	return nil, nil
}

// TestListScrubsKeys: the model never sees a key argument — the default
// key-like names and the registry's own key argument are gone from write
// and unregistered tools; a registered read keeps its schema.
func TestListScrubsKeys(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)

	props, req := schemaOf(t, s, "send_email")
	if _, ok := props["idempotency_key"]; ok || slices.Contains(req, "idempotency_key") {
		t.Errorf("send_email still lists idempotency_key: %v %v", props, req)
	}
	if _, ok := props["to"]; !ok || !slices.Equal(req, []string{"to", "subject"}) {
		t.Errorf("send_email lost more than its key: %v %v", props, req)
	}
	props, req = schemaOf(t, s, "create_ticket")
	if _, ok := props["client_ref"]; ok || slices.Contains(req, "client_ref") {
		t.Errorf("create_ticket still lists its key argument client_ref: %v %v", props, req)
	}
	if props, _ := schemaOf(t, s, "get_email"); props["message_id"] == nil {
		t.Errorf("the registered read get_email lost message_id: %v", props)
	}

	// Unregistered, get_email is no longer known to be a read: the next
	// list (the gate refreshes on every tools/list) scrubs it too.
	if err := e.client(t, e.srv.URL).DeleteTool(context.Background(), "get_email"); err != nil {
		t.Fatal(err)
	}
	if props, _ := schemaOf(t, s, "get_email"); props["message_id"] != nil {
		t.Errorf("the unregistered get_email still lists message_id: %v", props)
	}
}

// TestUpstreamListChange: a tool the upstream adds while the gate runs is
// announced to the client and listed scrubbed; one it removes is gone.
func TestUpstreamListChange(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)
	for len(s.listChanged) > 0 {
		<-s.listChanged // the initial list's
	}
	s.upstreamServer.AddTool(&mcp.Tool{Name: "send_sms", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"to":{"type":"string"},"request_id":{"type":"string"}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	select {
	case <-s.listChanged:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed from the gate after the upstream added a tool")
	}
	if props, _ := schemaOf(t, s, "send_sms"); props["to"] == nil || props["request_id"] != nil {
		t.Fatalf("send_sms listed as %v", props)
	}
	s.upstreamServer.RemoveTools("send_sms")
	testkit.Eventually(t, "send_sms to leave the list", func() bool {
		res, err := s.ListTools(context.Background(), nil)
		return err == nil && !slices.ContainsFunc(res.Tools, func(tl *mcp.Tool) bool { return tl.Name == "send_sms" })
	})
}

// TestSameWriteThreeTimes: one intent called three times — each time with
// a key of the model's own — is one upstream call under the ledger's key,
// and three identical results.
func TestSameWriteThreeTimes(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)

	var results []string
	for i := range 3 {
		args := map[string]any{"to": "ann@example.com", "subject": "Invoice INV-1042", "text": "Attached.",
			"idempotency_key": fmt.Sprintf("model-invented-%d", i)}
		res := s.call(t, "send_email", args, nil)
		if res.IsError {
			t.Fatalf("call %d: error result %s", i+1, text(res))
		}
		results = append(results, resultJSON(t, res))
	}
	if results[0] != results[1] || results[1] != results[2] {
		t.Fatalf("three calls, three results:\n%s\n%s\n%s", results[0], results[1], results[2])
	}
	if !strings.Contains(results[0], "sent em_1 to ann@example.com") || !strings.Contains(results[0], `"structuredContent":{"id":"em_1"`) {
		t.Errorf("the result is not the upstream's: %s", results[0])
	}
	calls := s.upstream.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls, want 1: %+v", len(calls), calls)
	}
	rows := e.rows(t)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	row := rows[0]
	if calls[0].Key() != row.Key || calls[0].Meta[mcpgate.MetaKey] != row.Key || calls[0].Meta[mcpgate.MetaLocalID] != row.MetadataLocalID {
		t.Errorf("upstream got key %q, meta %v; the row's key is %s, local id %s", calls[0].Key(), calls[0].Meta, row.Key, row.MetadataLocalID)
	}
	if row.Status != ledger.StatusSucceeded || row.RunID != "run_mcp" || row.Tool != "send_email" || row.Vendor != "resend" {
		t.Errorf("row %+v", row)
	}
	// The result as returned carries the gate's server info, a per-hop key.
	stored := mustDecode(t, row.Result)
	stored.Meta = mcp.Meta{"io.modelcontextprotocol/serverInfo": map[string]any{"name": "reconciler-mcp-gate", "version": "dev"}}
	if got := resultJSON(t, stored); got != results[0] {
		t.Errorf("stored result %s, returned %s", got, results[0])
	}
}

func mustDecode(t *testing.T, s string) *mcp.CallToolResult {
	t.Helper()
	var r mcp.CallToolResult
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatalf("result %q: %v", s, err)
	}
	return &r
}

// TestRunIDFromMeta: _meta["reconciler/run_id"] names the run, so the same
// arguments in two runs are two intents; without it, the session's run.
func TestRunIDFromMeta(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)
	args := map[string]any{"title": "Printer on fire"}
	for _, meta := range []mcp.Meta{{mcpgate.MetaRunID: "run_a", mcpgate.MetaToolCallID: "call_7"}, {mcpgate.MetaRunID: "run_b"}, nil, {mcpgate.MetaRunID: "run_a"}} {
		if res := s.call(t, "create_ticket", args, meta); res.IsError {
			t.Fatalf("meta %v: %s", meta, text(res))
		}
	}
	var runs []string
	for _, r := range e.rows(t) {
		runs = append(runs, r.RunID+"/"+r.ToolCallID)
	}
	slices.Sort(runs)
	if want := []string{"run_a/call_7", "run_b/", "run_mcp/"}; !slices.Equal(runs, want) {
		t.Fatalf("rows of runs %v, want %v", runs, want)
	}
	if n := s.upstream.Count("create_ticket"); n != 3 {
		t.Fatalf("%d upstream calls, want 3 (run_a's second is a replay)", n)
	}
	for _, c := range s.upstream.Calls() {
		if _, ok := c.Meta[mcpgate.MetaRunID]; ok {
			t.Errorf("the gate's _meta went upstream: %v", c.Meta)
		}
	}
	res := s.call(t, "create_ticket", args, mcp.Meta{mcpgate.MetaRunID: "run a"})
	if !res.IsError || res.Meta[mcpgate.MetaError] != "invalid_meta" || s.upstream.Count("create_ticket") != 3 {
		t.Fatalf("a bad run id: %s %v", text(res), res.Meta)
	}
}

// TestTimeoutLeavesUnknownThenWebhook: an upstream that commits and hangs
// past the gate's timeout leaves the row unknown; a repeat waits without a
// call; Resend's signed webhook settles it; a repeat then says it is done,
// without a call.
func TestTimeoutLeavesUnknownThenWebhook(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL, withTimeout(300*time.Millisecond))
	args := map[string]any{"to": "ann@example.com"}

	res := s.call(t, "slow_email", args, nil)
	if !res.IsError || res.Meta[mcpgate.MetaStatus] != "unknown" || !strings.Contains(text(res), "may have happened") {
		t.Fatalf("timed-out call: %s %v", text(res), res.Meta)
	}
	row := e.rows(t)[0]
	if row.Status != ledger.StatusUnknown {
		t.Fatalf("row %s, want unknown", row.Status)
	}
	if res := s.call(t, "slow_email", args, nil); !res.IsError || res.Meta[mcpgate.MetaDecision] != "wait" {
		t.Fatalf("repeat while unknown: %s %v", text(res), res.Meta)
	}

	e.deliver(t, row.MetadataLocalID)
	if got := e.rows(t)[0]; got.Status != ledger.StatusSucceeded || got.Resolution == nil || got.Resolution.Source != ledger.SourceWebhook {
		t.Fatalf("after the webhook: %+v", got)
	}
	res = s.call(t, "slow_email", args, nil)
	if res.IsError || res.Meta[mcpgate.MetaDecision] != "replay" || !strings.Contains(text(res), "succeeded before") {
		t.Fatalf("repeat after the webhook: %s %v", text(res), res.Meta)
	}
	if n := s.upstream.Count("slow_email"); n != 1 {
		t.Fatalf("%d upstream calls, want 1", n)
	}
}

// TestReadsPassThrough: a registered read goes upstream untouched and
// claims nothing; an unregistered tool is passed with key-like arguments
// removed, or refused by a strict gate.
func TestReadsPassThrough(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)
	meta := mcp.Meta{"progressToken": "p1", mcpgate.MetaRunID: "run_x"}
	res := s.call(t, "get_email", map[string]any{"message_id": "em_42"}, meta)
	if res.IsError || text(res) != "email em_42: delivered" {
		t.Fatalf("read: %s", text(res))
	}
	c := s.upstream.Calls()[0]
	if c.Args["message_id"] != "em_42" || c.Meta[mcpgate.MetaRunID] != "run_x" {
		t.Errorf("the read was changed on its way: %+v", c)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("a read claimed %d rows", len(rows))
	}

	if err := e.client(t, e.srv.URL).DeleteTool(context.Background(), "get_email"); err != nil {
		t.Fatal(err)
	}
	s.call(t, "get_email", map[string]any{"message_id": "em_42"}, nil)
	if c := s.upstream.Calls()[1]; c.Args["message_id"] != nil {
		t.Errorf("an unregistered tool got a key-like argument: %+v", c)
	}
	if rows := e.rows(t); len(rows) != 0 {
		t.Fatalf("an unregistered tool claimed %d rows", len(rows))
	}

	strictS := connect(t, e, e.srv.URL, strict())
	res = strictS.call(t, "get_email", map[string]any{"message_id": "em_42"}, nil)
	if !res.IsError || res.Meta[mcpgate.MetaError] != "unregistered_tool" || strictS.upstream.Count("get_email") != 0 {
		t.Fatalf("strict gate, unregistered tool: %s %v", text(res), res.Meta)
	}
}

// TestStopsComeBackAsResults: the kill switch (frozen through the admin
// API), a refused intent, a result past the cap and a key placement MCP
// cannot carry each answer as a result, with at most the one upstream call
// the first attempt made.
func TestStopsComeBackAsResults(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	header := tools()[0]
	header.Name, header.KeyPlacement = "get_email", ledger.KeyPlacement{Header: "Idempotency-Key"}
	header.Class = ledger.ClassWriteIdempotent
	s := connect(t, e, e.srv.URL)

	t.Run("frozen", func(t *testing.T) {
		e.admin(t, http.MethodPut, "/v1/admin/freezes/acme/send_email", `{"note":"incident 7","actor":"ops"}`)
		defer e.admin(t, http.MethodDelete, "/v1/admin/freezes/acme/send_email", "")
		res := s.call(t, "send_email", map[string]any{"to": "bob@example.com", "subject": "hi"}, nil)
		if !res.IsError || res.Meta[mcpgate.MetaDecision] != "stop" || res.Meta[mcpgate.MetaCode] != ledger.CodeToolFrozen {
			t.Fatalf("frozen: %s %v", text(res), res.Meta)
		}
		if n := s.upstream.Count("send_email"); n != 0 {
			t.Fatalf("a frozen tool reached upstream %d times", n)
		}
	})
	t.Run("refused by the tool", func(t *testing.T) {
		first := s.call(t, "reject_email", map[string]any{"to": "not-an-address"}, nil)
		again := s.call(t, "reject_email", map[string]any{"to": "not-an-address"}, nil)
		if !first.IsError || resultJSON(t, first) != resultJSON(t, again) || text(first) != "invalid recipient not-an-address" {
			t.Fatalf("refusals: %s / %s", resultJSON(t, first), resultJSON(t, again))
		}
		if n := s.upstream.Count("reject_email"); n != 1 {
			t.Fatalf("%d upstream calls, want 1", n)
		}
		for _, r := range e.rows(t) {
			if r.Tool == "reject_email" && r.Status != ledger.StatusFailedPoison {
				t.Fatalf("row %s, want failed_poison", r.Status)
			}
		}
	})
	t.Run("result past the cap", func(t *testing.T) {
		size := ledger.MaxResultLen + 1000
		first := s.call(t, "big_report", map[string]any{"size": size}, nil)
		if first.IsError || len(text(first)) != size {
			t.Fatalf("first call: %d bytes, error %v", len(text(first)), first.IsError)
		}
		again := s.call(t, "big_report", map[string]any{"size": size}, nil)
		if again.IsError || !strings.Contains(text(again), "larger than 64 KiB") {
			t.Fatalf("repeat: %s", text(again))
		}
		if n := s.upstream.Count("big_report"); n != 1 {
			t.Fatalf("%d upstream calls, want 1", n)
		}
	})
	t.Run("key placement MCP cannot carry", func(t *testing.T) {
		e.register(t, header)
		res := s.call(t, "get_email", map[string]any{"message_id": "em_1"}, nil)
		if !res.IsError || res.Meta[mcpgate.MetaError] != "key_placement" || s.upstream.Count("get_email") != 0 {
			t.Fatalf("header placement: %s %v", text(res), res.Meta)
		}
	})
}

// TestBadLedgerAnswers: a ledger that answers what is not its JSON, a 5xx,
// or nothing, at any step, is an error result — never a silent success —
// and before the upstream call no upstream call.
func TestBadLedgerAnswers(t *testing.T) {
	args := map[string]any{"to": "ann@example.com", "subject": "hi"}
	steps := []struct {
		name  string
		match func(r *http.Request) bool
		// called: the step comes after the upstream call.
		called bool
	}{
		{"registry read", func(r *http.Request) bool { return r.URL.Path == "/v1/tools/send_email" }, false},
		{"claim", func(r *http.Request) bool { return r.URL.Path == "/v1/claims" }, false},
		{"report", func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/outcome") }, true},
	}
	for _, step := range steps {
		for _, failure := range []string{"json", "5xx", "drop"} {
			t.Run(step.name+"/"+failure, func(t *testing.T) {
				e := newLedger(t)
				e.register(t, tools()...)
				p := proxy(t, e.srv.URL, func(r *http.Request) string {
					if step.match(r) {
						return failure
					}
					return ""
				})
				s := connect(t, e, p.URL)
				res := s.call(t, "send_email", args, nil)
				if !res.IsError || res.Meta[mcpgate.MetaError] == nil {
					t.Fatalf("result %s %v: want an error result naming the failure", text(res), res.Meta)
				}
				want := 0
				if step.called {
					want = 1
					if res.Meta[mcpgate.MetaError] != "report_failed" || !strings.Contains(text(res), "did not record") {
						t.Fatalf("lost report: %s %v", text(res), res.Meta)
					}
				}
				if n := s.upstream.Count("send_email"); n != want {
					t.Fatalf("%d upstream calls, want %d", n, want)
				}
			})
		}
	}
}

// TestDecisionsNotYetServed: await_approval and queued (§11) come back as
// results that say so; an unknown decision is an error result; none calls
// upstream.
func TestDecisionsNotYetServed(t *testing.T) {
	for _, tc := range []struct {
		decision string
		isError  bool
		says     string
	}{
		{"await_approval", false, "approval"},
		{"queued", false, "outbox worker"},
		{"launch_missiles", true, "unknown decision"},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			e := newLedger(t)
			e.register(t, tools()...)
			row := fmt.Sprintf(`{"tenant":"acme","key":"%s","status":"pending","metadata_local_id":"rl_%s"}`,
				strings.Repeat("a", 64), strings.Repeat("b", 32))
			fake := fakeClaims(t, e.srv.URL, `{"decision":"`+tc.decision+`","row":`+row+`}`)
			s := connect(t, e, fake)
			res := s.call(t, "send_email", map[string]any{"to": "ann@example.com"}, nil)
			if res.IsError != tc.isError || !strings.Contains(text(res), tc.says) {
				t.Fatalf("%s: %s (error %v)", tc.decision, text(res), res.IsError)
			}
			if n := s.upstream.Count("send_email"); n != 0 {
				t.Fatalf("%d upstream calls, want 0", n)
			}
		})
	}
}

// fakeClaims answers every claim with body (202) and forwards the rest to
// the real ledger.
func fakeClaims(t *testing.T, target, body string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/claims" {
			rp.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestUpstreamProcess: the gate in front of an upstream that runs as its
// own process (mcp.CommandTransport), the way `reconciler mcp-gate --
// CMD` runs one: three calls, one side effect.
func TestUpstreamProcess(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	logPath := filepath.Join(t.TempDir(), "upstream.jsonl")
	argv := mcptest.Command(logPath)
	g, err := mcpgate.New(mcpgate.Options{Ledger: e.client(t, e.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Open(context.Background(), &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}); err != nil {
		t.Fatalf("Open: %v", err)
	}
	s := serve(t, g, nil)
	var first string
	for i := range 3 {
		res := s.call(t, "send_email", map[string]any{"to": "ann@example.com", "subject": "hi"}, nil)
		if i == 0 {
			first = resultJSON(t, res)
		} else if got := resultJSON(t, res); got != first {
			t.Fatalf("call %d: %s, first %s", i+1, got, first)
		}
	}
	// The upstream writes a call's line before it answers it.
	calls, err := mcptest.ReadLog(logPath)
	if err != nil || mcptest.CountIn(calls, "send_email") != 1 {
		t.Fatalf("upstream calls %+v (%v), want one send_email", calls, err)
	}
	if rows := e.rows(t); len(rows) != 1 || rows[0].RunID != g.RunID() || !strings.HasPrefix(g.RunID(), "mcp-") {
		t.Fatalf("rows %+v, gate run %s", rows, g.RunID())
	}
}

// TestUpstreamProtocolErrors: an upstream that refuses a call as malformed
// did not do it (failed_poison, and the same refusal again without a
// call); one that fails inside may have (unknown).
func TestUpstreamProtocolErrors(t *testing.T) {
	e := newLedger(t)
	e.register(t, tools()...)
	s := connect(t, e, e.srv.URL)
	// The newest row is the call just made (each code is its own intent).
	latest := func() ledger.Status { return e.rows(t)[0].Status }

	invalid := map[string]any{"code": -32602}
	first := s.call(t, "fail_email", invalid, nil)
	if !first.IsError || !strings.Contains(text(first), "refused the call: failed with -32602") || latest() != ledger.StatusFailedPoison {
		t.Fatalf("invalid params: %s, row %s", text(first), latest())
	}
	if again := s.call(t, "fail_email", invalid, nil); resultJSON(t, again) != resultJSON(t, first) || s.upstream.Count("fail_email") != 1 {
		t.Fatalf("the refused call again: %s (%d upstream calls)", resultJSON(t, again), s.upstream.Count("fail_email"))
	}

	res := s.call(t, "fail_email", map[string]any{"code": -32603}, nil)
	if !res.IsError || res.Meta[mcpgate.MetaStatus] != "unknown" || latest() != ledger.StatusUnknown {
		t.Fatalf("internal error: %s %v", text(res), res.Meta)
	}
}

// TestStreamableUpstream: the gate in front of a streamable-HTTP upstream
// (`--upstream-url`): writes go through once; an HTTP answer that is not
// the upstream's (a 5xx, a page that is not JSON) or a dropped connection
// is no answer, so the row is unknown, never a success.
func TestStreamableUpstream(t *testing.T) {
	for _, failure := range []string{"", "5xx", "json", "drop"} {
		t.Run("failure="+failure, func(t *testing.T) {
			e := newLedger(t)
			e.register(t, tools()...)
			log := mcptest.NewLog("")
			up := mcptest.NewServer(log)
			h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if failure == "" || !bytes.Contains(body, []byte(`"tools/call"`)) {
					h.ServeHTTP(w, r)
					return
				}
				switch failure {
				case "5xx":
					w.WriteHeader(http.StatusBadGateway)
				case "json":
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write([]byte("<html>ok</html>"))
				case "drop":
					if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
						_ = conn.Close()
					}
				}
			}))
			t.Cleanup(srv.Close)
			g, err := mcpgate.New(mcpgate.Options{Ledger: e.client(t, e.srv.URL), CallTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Open(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}); err != nil {
				t.Fatalf("Open: %v", err)
			}
			s := serve(t, g, log)
			args := map[string]any{"to": "ann@example.com", "subject": "hi"}
			res := s.call(t, "send_email", args, nil)
			rows := e.rows(t)
			if failure == "" {
				again := s.call(t, "send_email", args, nil)
				if res.IsError || resultJSON(t, res) != resultJSON(t, again) || log.Count("send_email") != 1 || rows[0].Status != ledger.StatusSucceeded {
					t.Fatalf("through a streamable upstream: %s / %s, %d calls", resultJSON(t, res), resultJSON(t, again), log.Count("send_email"))
				}
				return
			}
			if !res.IsError || res.Meta[mcpgate.MetaStatus] != "unknown" || len(rows) != 1 || rows[0].Status != ledger.StatusUnknown {
				t.Fatalf("upstream %s: %s %v, rows %+v", failure, text(res), res.Meta, rows)
			}
		})
	}
}
