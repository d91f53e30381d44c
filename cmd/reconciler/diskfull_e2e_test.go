package main

import (
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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/events"
	"github.com/agentledger/reconciler/fixtures"
	"github.com/agentledger/reconciler/internal/natstest"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// mountSmallFS mounts a size-limited tmpfs and unmounts it when the test
// ends; it skips the test, saying why, where the machine cannot mount.
func mountSmallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the full-disk test mounts a small tmpfs, which needs root: skipped")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs (%v: %s): skipped", size, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// httpDo sends one request and returns the status, the Retry-After header
// and the body.
func httpDo(t *testing.T, req *http.Request) (int, string, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// TestE2EDiskFull fills a real small file system under the running
// program: claims and webhooks answer 503 with Retry-After, /readyz says
// the disk is full, one log line says it, reads go on, nothing is
// corrupted; once space is freed the node serves again by itself, the
// relay publishes, and every acknowledged claim is there.
func TestE2EDiskFull(t *testing.T) {
	start0 := time.Now()
	data := mountSmallFS(t, "4m")
	ballast := filepath.Join(data, "ballast")
	if err := os.WriteFile(ballast, bytes.Repeat([]byte{1}, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Start(t, t.TempDir(), "", false) // the event stream lives elsewhere
	cfg := writeStripeConfig(t, t.TempDir())
	// Without the write-ahead log: on a 4 MiB file system the log's
	// segments and bbolt's growth compete for the last megabytes, and
	// with the race detector's pace bbolt's batch commits did not get room
	// back within the test's 20 s (issue 32's report). The log's own
	// failure paths are ledger/bolt's TestIOFailureIsUnavailable/wal.
	env := map[string]string{"E2E_TOKEN": e2eToken, "E2E_ADMIN": e2eAdmin, "E2E_STRIPE_SECRET": e2eStripeSecret, "RECONCILER_BOLT_WAL": "false"}
	m := startMain(t, env, "serve", "--config", cfg, "--data", data, "--nats-url", ns.ClientURL(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()

	claim := func(key string) (int, string, string) {
		body := `{"key":"` + key + `","run_id":"run_disk","tool":"stripe.payment_intents.create","vendor":"stripe","tool_class":"write_idempotent",
			"intent":{"amount":1050,"currency":"usd","customer":"cus_1"},
			"request":{"method":"POST","path":"/v1/payment_intents","content_type":"application/x-www-form-urlencoded","body":"amount=1050&currency=usd&description=` + strings.Repeat("x", 6000) + `"}}`
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/claims", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		req.Header.Set("Content-Type", "application/json")
		return httpDo(t, req)
	}

	// Fill the disk: 8 callers claim new keys until one gets a 503.
	var (
		mu      sync.Mutex
		acked   []string
		full    atomic.Bool
		next    atomic.Int64
		retryAf atomic.Value
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !full.Load() && time.Now().Before(deadline) {
				key := fmt.Sprintf("disk-%06d", next.Add(1))
				code, ra, body := claim(key)
				switch code {
				case http.StatusCreated:
					mu.Lock()
					acked = append(acked, key)
					mu.Unlock()
				case http.StatusServiceUnavailable:
					retryAf.Store(ra)
					full.Store(true)
				default:
					t.Errorf("claim %s = %d %s", key, code, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !full.Load() {
		t.Fatalf("the disk never filled (%d claims)", len(acked))
	}
	if ra, _ := retryAf.Load().(string); ra == "" {
		t.Fatal("a claim's 503 has no Retry-After")
	}
	// At the edge a small commit may still fit between failing ones: go
	// on, one claim at a time, until five in a row find no room.
	for fails := 0; fails < 5; {
		if time.Now().After(deadline) {
			t.Fatal("the disk never stayed full")
		}
		key := fmt.Sprintf("disk-%06d", next.Add(1))
		switch code, ra, body := claim(key); code {
		case http.StatusCreated:
			acked, fails = append(acked, key), 0
		case http.StatusServiceUnavailable:
			if ra == "" {
				t.Fatalf("a claim's 503 has no Retry-After: %s", body)
			}
			fails++
		default:
			t.Fatalf("claim %s = %d %s", key, code, body)
		}
	}
	t.Logf("the disk filled after %d acknowledged claims (%s)", len(acked), time.Since(start0))

	// Claims and webhooks answer 503 with Retry-After while it is full.
	if code, ra, body := claim("disk-while-full"); code != http.StatusServiceUnavailable || ra == "" || !strings.Contains(body, `"unavailable"`) {
		t.Fatalf("claim while full = %d Retry-After %q %s", code, ra, body)
	}
	// Whatever room is left on the file system goes to another file: the
	// ledger has only the free pages inside its own file now.
	filler, err := os.Create(filepath.Join(data, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	// A vendor's delivery either fits in those free pages (200) or finds
	// no room (503 with Retry-After, and the vendor retries). Updates of
	// existing rows recycle their own pages; deliveries for local ids no
	// row has yet (parked as orphans, remembered in the inbox) grow the
	// file, so they run out: deliver them until one finds no room.
	deliverFor := func(localID string) (int, string, string) {
		payload, err := fixtures.Set(fixtures.Load("stripe/2024-06-20/payment_intent.succeeded"), "metadata_local_id", localID)
		if err != nil {
			t.Fatal(err)
		}
		payload, err = fixtures.Set(payload, "id", "evt_"+localID)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", "http://"+addr+"/webhooks/stripe", bytes.NewReader(payload))
		req.Header.Set("Stripe-Signature", fixtures.SignStripe(payload, time.Now(), e2eStripeSecret))
		return httpDo(t, req)
	}
	refused := ""
	delivered := 0
	for i := 0; refused == "" && time.Now().Before(deadline); i++ {
		lid := fmt.Sprintf("rl_%032x", i)
		code, ra, body := deliverFor(lid)
		switch {
		case code == http.StatusOK:
			delivered++
		case code == http.StatusServiceUnavailable && ra != "":
			refused = lid
		default:
			t.Fatalf("webhook while full = %d Retry-After %q %s", code, ra, body)
		}
	}
	if refused == "" {
		t.Fatalf("every webhook fit in the ledger's free pages (%d)", delivered)
	}
	t.Logf("webhooks while full: %d fit in the file's free pages, then 503 with Retry-After (%s)", delivered, time.Since(start0))
	_, row := call(t, addr, e2eToken, "GET", "/v1/claims/"+acked[0], "") // reads go on
	deliver := func() (int, string, string) { return deliverFor(rowField(t, row, "metadata_local_id")) }
	ready := func() (int, map[string]any) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/readyz", nil)
		code, _, body := httpDo(t, req)
		var out map[string]any
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("/readyz: %q", body)
		}
		return code, out
	}
	code, health := ready()
	details, _ := health["details"].(map[string]any)
	if code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(health["failing"]), "store_writes") ||
		!strings.HasPrefix(fmt.Sprint(details["store_writes"]), "disk full") {
		t.Fatalf("/readyz while full = %d %v", code, health)
	}
	if n := strings.Count(m.stderr.String(), `"msg":"bolt: disk full`); n != 1 {
		t.Fatalf("%d log lines say the disk is full, want 1", n)
	}

	// Space comes back: the node serves again by itself.
	for _, f := range []string{ballast, filepath.Join(data, "filler")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(20 * time.Second)
	for {
		if code, _ := ready(); code == http.StatusOK {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("/readyz still failing after space was freed: %v\nlog:\n%s", health, m.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("ready again (%s)", time.Since(start0))
	if code, _, body := deliverFor(refused); code != http.StatusOK {
		t.Fatalf("the vendor's retry after recovery = %d %s", code, body)
	}
	if code, _, body := deliver(); code != http.StatusOK {
		t.Fatalf("a delivery for an acknowledged claim after recovery = %d %s", code, body)
	}
	if code, _, body := claim("disk-while-full"); code != http.StatusCreated {
		t.Fatalf("the agent's retry after recovery = %d %s", code, body)
	}
	// The relay survived: the webhook's succeeded event reaches the stream, once.
	_, js, err := events.Connect(ns.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSubjects(t, js, "recon.default.run_disk.succeeded", map[string]uint64{"recon.default.run_disk.succeeded": 1})
	if !strings.Contains(m.stderr.String(), `"msg":"bolt: writes succeed again`) {
		t.Error("no log line says writes succeed again")
	}

	t.Logf("event published (%s)", time.Since(start0))
	// Nothing corrupted: the file passes bbolt's and the ledger's checks.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := bolt.CheckFile(ctx, filepath.Join(data, "reconciler.db"))
	if err != nil {
		t.Fatalf("the ledger after a full disk: %v", err)
	}
	if rep.Rows != int64(len(acked))+1 {
		t.Fatalf("the file holds %d rows, %d were acknowledged", rep.Rows, len(acked)+1)
	}
	st, err := bolt.Open(filepath.Join(data, "reconciler.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, k := range append(acked, "disk-while-full") {
		if _, err := st.Get(ctx, "default", k); err != nil {
			t.Fatalf("acknowledged claim %s after the episode: %v", k, err)
		}
	}
}
