package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/cmd/reconciler/internal/configtest"
	"github.com/agentledger/reconciler/ledger/bolt"
)

// TestE2EBackupUnderClaims: `reconciler backup` of a node taking claims,
// restored into another data directory with `reconciler restore`, holds
// every claim acknowledged (201) before the backup began; a node started
// on it serves them.
func TestE2EBackupUnderClaims(t *testing.T) {
	m := startMain(t, e2eEnv, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0")
	addr := m.HTTPAddr()
	type ack struct {
		key string
		at  time.Time
	}
	var (
		mu    sync.Mutex
		acks  []ack
		n     atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("bk-%d-%d", w, i)
				body := `{"key":"` + key + `","run_id":"run_bk","tool":"stripe.payment_intents.create","vendor":"stripe","tool_class":"write_idempotent","intent":{"amount":1050,"currency":"usd"}}`
				req, _ := http.NewRequest("POST", "http://"+addr+"/v1/claims", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+e2eToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					fails.Add(1)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					fails.Add(1)
					return
				}
				done := time.Now()
				mu.Lock()
				acks = append(acks, ack{key, done})
				mu.Unlock()
				n.Add(1)
			}
		}()
	}
	for n.Load() < 200 {
		time.Sleep(10 * time.Millisecond)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "backup.db")
	began := time.Now()
	before := n.Load()
	var stdout, stderr bytes.Buffer
	if code := runBackup(context.Background(), []string{"--url", "http://" + addr, "--out", out}, &stdout, &stderr,
		configtest.MapEnv(map[string]string{"RECONCILER_ADMIN_TOKEN": e2eAdmin})); code != 0 {
		t.Fatalf("backup exit %d: %s", code, stderr.String())
	}
	during := n.Load() - before
	close(stop)
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d claims failed during the backup", fails.Load())
	}
	t.Logf("%s(%d claims acknowledged while the backup ran)", stdout.String(), during)

	if code := runRestore(context.Background(), []string{"--from", out, "--data", filepath.Join(dir, "restored")}, &stdout, &stderr); code != 0 {
		t.Fatalf("restore exit %d: %s", code, stderr.String())
	}
	st, err := bolt.Open(filepath.Join(dir, "restored", "reconciler.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checked := 0
	for _, a := range acks {
		if !a.at.Before(began) {
			continue
		}
		checked++
		if _, err := st.Get(context.Background(), "default", a.key); err != nil {
			t.Fatalf("claim %s, acknowledged before the backup began, is not in the restore: %v", a.key, err)
		}
	}
	if checked < 200 {
		t.Fatalf("only %d claims acknowledged before the backup", checked)
	}
	if err := st.CheckConsistency(context.Background()); err != nil {
		t.Fatal(err)
	}
}
