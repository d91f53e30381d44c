package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/events/natsserver"
)

const (
	e2eToken = "e2e-tenant-token-0123456789"
	e2eAdmin = "e2e-admin-token-0123456789"
)

var e2eEnv = map[string]string{"RECONCILER_TOKEN": e2eToken, "RECONCILER_ADMIN_TOKEN": e2eAdmin}

// call sends one JSON request to the running program and decodes the answer.
func call(t *testing.T, addr, token, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func rowField(t *testing.T, body map[string]any, field string) string {
	t.Helper()
	row, ok := body["row"].(map[string]any)
	if !ok {
		t.Fatalf("no row in %v", body)
	}
	s, _ := row[field].(string)
	return s
}

// streamSubjects returns the per-subject message counts of the stream.
func streamSubjects(ctx context.Context, t *testing.T, js jetstream.JetStream, filter string) map[string]uint64 {
	t.Helper()
	s, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Subjects
}

// waitSubjects polls until the stream holds want (subject → count), then
// checks it stays so (a relay that published twice would add messages).
func waitSubjects(t *testing.T, js jetstream.JetStream, filter string, want map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got map[string]uint64
	for ctx.Err() == nil {
		got = streamSubjects(ctx, t, js, filter)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			time.Sleep(300 * time.Millisecond) // a double publish would show by now
			got = streamSubjects(ctx, t, js, filter)
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("stream subjects = %v, want %v", got, want)
}

func checkMsgID(t *testing.T, js jetstream.JetStream, subject, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("last message on %s: %v", subject, err)
	}
	if got := msg.Header.Get(jetstream.MsgIDHeader); got != want {
		t.Errorf("Nats-Msg-Id on %s = %q, want %q", subject, got, want)
	}
	var ev map[string]any
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatalf("event body: %v", err)
	}
	for _, f := range []string{"key", "tenant", "run_id", "tool", "status", "source", "at"} {
		if _, ok := ev[f]; !ok {
			t.Errorf("event body on %s lacks %q: %s", subject, f, msg.Data)
		}
	}
}

const e2eClaim = `{"run_id":"run_e2e","tool":"stripe.payment_intents.create","tool_call_id":"call_1",
	"vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd","customer":"cus_1"}}`

// TestE2EClaimTimeoutResolve drives the real program: claim → the vendor
// call times out (unknown) → an operator resolves it → one event per status
// on the right subject with the right Nats-Msg-Id.
func TestE2EClaimTimeoutResolve(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusCreated || body["decision"] != "proceed" {
		t.Fatalf("claim = %d %v", code, body)
	}
	key := rowField(t, body, "key")
	code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`)
	if code != http.StatusOK || rowField(t, body, "status") != "unknown" {
		t.Fatalf("outcome = %d %v", code, body)
	}
	// The same intent again: the retry reuses the key.
	code, body = call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusOK || body["decision"] != "retry_same_key" || rowField(t, body, "key") != key {
		t.Fatalf("second claim = %d %v", code, body)
	}
	code, body = call(t, addr, e2eAdmin, "POST", "/v1/claims/"+key+"/resolve",
		`{"tenant":"default","status":"succeeded","receipt_id":"pi_e2e","note":"seen in the dashboard","actor":"ops"}`)
	if code != http.StatusOK || rowField(t, body, "status") != "succeeded" {
		t.Fatalf("resolve = %d %v", code, body)
	}
	code, body = call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusOK || body["decision"] != "replay" || rowField(t, body, "upstream_receipt_id") != "pi_e2e" {
		t.Fatalf("third claim = %d %v", code, body)
	}

	_, js, err := events.Connect(m.NATSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.default.run_e2e.>", map[string]uint64{
		"recon.default.run_e2e.unknown":   1,
		"recon.default.run_e2e.succeeded": 1,
	})
	checkMsgID(t, js, "recon.default.run_e2e.succeeded", "default:"+key+":succeeded")
	checkMsgID(t, js, "recon.default.run_e2e.unknown", "default:"+key+":unknown")
	// The relay counts into the series /metrics serves (docs/architecture.md §6a).
	waitMetrics(t, addr,
		"# TYPE reconciler_outbox_depth gauge", "reconciler_outbox_depth 0",
		"# TYPE reconciler_relay_lag_seconds histogram", "reconciler_relay_lag_seconds_count 2",
		"# TYPE reconciler_relay_publishes_total counter", `reconciler_relay_publishes_total{result="published"} 2`)
}

// waitMetrics polls GET /metrics until it holds every one of lines.
func waitMetrics(t *testing.T, addr string, lines ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var missing []string
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, l := range strings.Split(string(body), "\n") {
			have[l] = true
		}
		missing = missing[:0]
		for _, l := range lines {
			if !have[l] {
				missing = append(missing, l)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics lacks %q", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestE2EKillBetweenCommitAndPublish commits a transition while NATS is down,
// SIGKILLs the process before the relay could publish it, and checks that
// the restarted program publishes it, once.
func TestE2EKillBetweenCommitAndPublish(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	natsOpts := natsserver.DefaultOptions(filepath.Join(dir, "nats"), nil)
	natsOpts.Listen = "127.0.0.1:0"
	ctx := context.Background()
	ns, err := natsserver.Start(ctx, natsOpts)
	if err != nil {
		t.Fatal(err)
	}
	natsURL := ns.ClientURL()
	natsOpts.Listen = strings.TrimPrefix(natsURL, "nats://") // the same port after the restart

	child := exec.Command(os.Args[0], "-test.run=^TestE2EChild$", "-test.v")
	child.Env = append(os.Environ(), "RECONCILER_E2E_CHILD=1", "RECONCILER_E2E_DATA="+data, "RECONCILER_E2E_NATS="+natsURL)
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = io.Discard
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	addr := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "E2E-ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the child never reported its address")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	// NATS goes away; the transition commits; the relay cannot publish it.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ns.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusCreated {
		t.Fatalf("claim = %d %v", code, body)
	}
	key := rowField(t, body, "key")
	if code, body = call(t, addr, e2eToken, "POST", "/v1/claims/"+key+"/outcome", `{"kind":"timeout"}`); code != http.StatusOK {
		t.Fatalf("outcome = %d %v", code, body)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	ns, err = natsserver.Start(ctx, natsOpts)
	if err != nil {
		t.Fatalf("restart nats: %v", err)
	}
	t.Cleanup(func() { _ = ns.Shutdown(context.Background()) })
	m := startMain(t, e2eEnv, "serve", "--data", data, "--http", "127.0.0.1:0", "--nats-url", natsURL)
	_, js, err := events.Connect(m.NATSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.default.run_e2e.>", map[string]uint64{"recon.default.run_e2e.unknown": 1})
	checkMsgID(t, js, "recon.default.run_e2e.unknown", "default:"+key+":unknown")
}

// TestE2EChild is the process TestE2EKillBetweenCommitAndPublish kills.
func TestE2EChild(t *testing.T) {
	if os.Getenv("RECONCILER_E2E_CHILD") != "1" {
		t.Skip("run by TestE2EKillBetweenCommitAndPublish")
	}
	m := NewMain()
	var logs bytes.Buffer
	m.Stderr = &logs
	m.Getenv = configtest.MapEnv(e2eEnv)
	args := []string{"serve", "--data", os.Getenv("RECONCILER_E2E_DATA"), "--http", "127.0.0.1:0", "--nats-url", os.Getenv("RECONCILER_E2E_NATS")}
	if err := m.ParseFlags(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("E2E-ADDR %s\n", m.HTTPAddr())
	select {} // until SIGKILL
}

// TestE2EShutdownEndsLongPolls: a claim long-polling with ?wait=30s on a
// row in flight does not hold a graceful shutdown: it answers 409 wait at
// once, and Close finishes every stage in a fraction of its budget.
func TestE2EShutdownEndsLongPolls(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()
	code, body := call(t, addr, e2eToken, "POST", "/v1/claims", e2eClaim)
	if code != http.StatusCreated {
		t.Fatalf("claim = %d %v", code, body)
	}
	type answer struct {
		code int
		body map[string]any
	}
	polled := make(chan answer, 1)
	go func() {
		c, b := call(t, addr, e2eToken, "POST", "/v1/claims?wait=30s", e2eClaim)
		polled <- answer{c, b}
	}()
	time.Sleep(300 * time.Millisecond) // the long poll is waiting on the lease
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %s: the long poll held the shutdown", d)
	}
	select {
	case a := <-polled:
		if a.code != http.StatusConflict || a.body["decision"] != "wait" {
			t.Fatalf("long poll answered %d %v, want 409 wait", a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long poll did not answer")
	}
}
