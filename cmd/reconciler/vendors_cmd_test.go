package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/internal/fakemailgun"
)

// A Postmark-shaped vendor for the command: the outbound search by
// metadata, 500 while down. And a Resend-shaped create that remembers
// keys (or ignores them), for --probe.
func vendorsFake(t *testing.T) (*httptest.Server, *vendorsFakeState) {
	st := &vendorsFakeState{messages: map[string][]string{}, keys: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		st.mu.Lock()
		defer st.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if st.down {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"ErrorCode":500,"Message":"Internal server error"}`)
			return
		}
		switch {
		case r.URL.Path == "/messages/outbound":
			if r.Header.Get("X-Postmark-Server-Token") != "pm-secret-token" {
				w.WriteHeader(401)
				return
			}
			var out []string
			for _, id := range st.messages[r.URL.Query().Get("metadata_local_id")] {
				out = append(out, fmt.Sprintf(`{"MessageID":%q,"Status":"Sent"}`, id))
			}
			fmt.Fprintf(w, `{"TotalCount":%d,"Messages":[%s]}`, len(out), strings.Join(out, ","))
		case r.URL.Path == "/emails" && r.Method == "POST":
			st.posts++
			k := r.Header.Get("Idempotency-Key")
			id, ok := st.keys[k]
			if !ok || st.ignoreKeys {
				id = fmt.Sprintf("em_%d", st.posts)
				st.keys[k] = id
			}
			fmt.Fprintf(w, `{"id":%q}`, id)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, st
}

type vendorsFakeState struct {
	mu         sync.Mutex
	down       bool
	ignoreKeys bool
	posts      int
	messages   map[string][]string
	keys       map[string]string
}

func TestVendorsCommand(t *testing.T) {
	srv, st := vendorsFake(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "reconciler.yaml")
	cfg := fmt.Sprintf(`
vendors:
  - name: postmark
    preset: postmark
    api_base: %s
    api_key: ${PM_TOKEN}
  - name: resend
    preset: resend
    api_base: %s
    api_key: ${RESEND_KEY}
`, srv.URL, srv.URL)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	reqFile := filepath.Join(dir, "req.json")
	if err := os.WriteFile(reqFile, []byte(`{"method":"POST","path":"/emails","content_type":"application/json","body":"{\"to\":\"a@example.com\"}"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RECONCILER_CONFIG": cfgFile, "PM_TOKEN": "pm-secret-token", "RESEND_KEY": "re_secret_key"}
	getenv := func(k string) string { return env[k] }
	st.messages["rl_one"] = []string{"b7bc-1"}
	st.messages["rl_two"] = []string{"b7bc-2", "b7bc-3"}

	cases := []struct {
		name     string
		args     []string
		setup    func()
		wantCode int
		want     string
	}{
		{"list", []string{"list"}, nil, 0, "postmark  postmark  none"},
		{"found", []string{"check", "postmark", "--local-id", "rl_one"}, nil, 0, "found b7bc-1 (succeeded)"},
		{"duplicate", []string{"check", "postmark", "--local-id", "rl_two"}, nil, 0, "duplicate — would page"},
		{"absent", []string{"check", "postmark", "--local-id", "rl_none", "--age", "1h"}, nil, 0, "absent\n"},
		{"too young", []string{"check", "postmark", "--local-id", "rl_none", "--age", "1m"}, nil, 0, "too young to tell"},
		{"no lookup", []string{"check", "resend", "--local-id", "rl_none"}, nil, 0, "no lookup: the resolver would replay"},
		{"vendor down", []string{"check", "postmark", "--local-id", "rl_one"}, func() { st.down = true }, 1, ""},
		{"unknown vendor", []string{"check", "mailchimp", "--local-id", "rl_one"}, nil, 2, ""},
		{"no local id", []string{"check", "postmark"}, nil, 2, ""},
		{"probe refused", []string{"check", "resend", "--probe", "--request", reqFile}, nil, 2, ""},
		{"probe: replayed", []string{"check", "resend", "--probe", "--i-know-this-writes", "--request", reqFile}, nil, 0, "replayed: both answers name"},
		{"probe: ignored", []string{"check", "resend", "--probe", "--i-know-this-writes", "--request", reqFile}, func() { st.ignoreKeys = true }, 0, "NOT replayed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st.mu.Lock()
			st.down, st.ignoreKeys = false, false
			if tc.setup != nil {
				tc.setup()
			}
			st.mu.Unlock()
			var out, errOut bytes.Buffer
			code := runVendors(context.Background(), tc.args, &out, &errOut, getenv)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.wantCode, out.String(), errOut.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("stdout %q, want %q", out.String(), tc.want)
			}
			for _, secret := range []string{"pm-secret-token", "re_secret_key"} {
				if strings.Contains(out.String()+errOut.String(), secret) {
					t.Errorf("output leaks %s", secret)
				}
			}
		})
	}
}

// TestVendorsCheckMailgun: a lookup that lists from the row's first_seen_at
// starts --age ago: a message sent within that hour is found past the
// other messages' events, across pages.
func TestVendorsCheckMailgun(t *testing.T) {
	mg := fakemailgun.New("mg.example.com", "key-check", time.Now)
	t.Cleanup(mg.Close)
	mg.Noise(320)
	mg.Add("m-check@mg.example.com", "rl_check", "accepted", "")
	mg.Add("m-check@mg.example.com", "rl_check", "delivered", "")
	cfgFile := filepath.Join(t.TempDir(), "reconciler.yaml")
	cfg := fmt.Sprintf("vendors:\n  - {name: mailgun, preset: mailgun, api_base: %s, api_key: key-check, rate_limit: 100/s}\n", mg.APIBase())
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"RECONCILER_CONFIG": cfgFile}[k] }
	var out, errOut bytes.Buffer
	code := runVendors(context.Background(), []string{"check", "mailgun", "--local-id", "rl_check", "--age", "1h"}, &out, &errOut, getenv)
	if code != 0 || !strings.Contains(out.String(), "found m-check@mg.example.com (succeeded)") {
		t.Fatalf("exit %d, stdout %q stderr %q", code, out.String(), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), "key-check") {
		t.Error("output leaks the API key")
	}
}
