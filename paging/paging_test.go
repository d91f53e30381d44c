package paging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/paging"
)

// fakePD is a PagerDuty Events v2 endpoint that records every event and
// answers the queued status codes first, then 202.
type fakePD struct {
	mu     sync.Mutex
	events []map[string]any
	codes  []int
	srv    *httptest.Server
}

func newFakePD(t *testing.T, codes ...int) *fakePD {
	t.Helper()
	f := &fakePD{codes: codes}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.events = append(f.events, ev)
		code := http.StatusAccepted
		if len(f.codes) > 0 {
			code, f.codes = f.codes[0], f.codes[1:]
		}
		f.mu.Unlock()
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"status":"success","message":"Event processed","dedup_key":"x"}`))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePD) got() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.events...)
}

var fastRetry = paging.Retry{Base: time.Millisecond, Max: 4 * time.Millisecond, AttemptTimeout: time.Second}

const routingKey = "R0UT1NGKEYSECRET0123456789abcdef"

func TestPagerDutyTrigger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		codes     []int
		wantErr   error
		wantCalls int
	}{
		{"accepted", nil, nil, 1},
		{"retries 429 and 5xx then accepted", []int{429, 500, 503}, nil, 4},
		{"400 is permanent", []int{400}, paging.ErrRejected, 1},
		{"403 is permanent", []int{403}, paging.ErrRejected, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakePD(t, tc.codes...)
			pd, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: f.srv.URL, RoutingKey: routingKey, Retry: fastRetry})
			if err != nil {
				t.Fatal(err)
			}
			err = pd.Trigger(context.Background(), paging.Page{
				DedupKey: paging.DedupKey("acme", "k1"), Summary: strings.Repeat("s", 2000),
				CustomDetails: map[string]any{"tenant": "acme"},
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Trigger err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), routingKey) {
				t.Errorf("error leaks the routing key: %v", err)
			}
			evs := f.got()
			if len(evs) != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", len(evs), tc.wantCalls)
			}
			for _, ev := range evs {
				if ev["dedup_key"] != "recon:acme:k1" || ev["event_action"] != "trigger" || ev["routing_key"] != routingKey {
					t.Errorf("event = %v", ev)
				}
				p, _ := ev["payload"].(map[string]any)
				if s, _ := p["summary"].(string); len([]rune(s)) != paging.MaxSummaryLen {
					t.Errorf("summary length = %d, want %d", len([]rune(s)), paging.MaxSummaryLen)
				}
				if p["source"] != paging.DefaultSource || p["severity"] != "error" {
					t.Errorf("payload = %v", p)
				}
				if d, _ := p["custom_details"].(map[string]any); d["tenant"] != "acme" {
					t.Errorf("custom_details = %v", p["custom_details"])
				}
			}
		})
	}
}

func TestPagerDutyGivesUpAtDeadline(t *testing.T) {
	f := newFakePD(t, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500, 500)
	retry := paging.Retry{Base: 20 * time.Millisecond, Max: 40 * time.Millisecond, AttemptTimeout: time.Second}
	pd, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: f.srv.URL, RoutingKey: routingKey, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err = pd.Trigger(ctx, paging.Page{DedupKey: "recon:k"})
	if !errors.Is(err, paging.ErrUndelivered) {
		t.Fatalf("err = %v, want ErrUndelivered", err)
	}
	// With a 150 ms budget and backoff ceilings of 20-40 ms, the attempts
	// are few; the bound is loose so a slow machine does not fail it.
	if n := len(f.got()); n < 1 || n > 15 {
		t.Errorf("attempts = %d, want 1..15", n)
	}
}

func TestPagerDutyNetworkErrorIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	pd, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: addr + "/v2/enqueue", RoutingKey: routingKey, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = pd.Trigger(ctx, paging.Page{DedupKey: "recon:k"})
	if !errors.Is(err, paging.ErrUndelivered) {
		t.Fatalf("err = %v, want ErrUndelivered", err)
	}
	if strings.Contains(err.Error(), "/v2/enqueue") {
		t.Errorf("error names the URL: %v", err)
	}
}

func TestPagerDutyResolve(t *testing.T) {
	f := newFakePD(t, 502)
	pd, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: f.srv.URL, RoutingKey: routingKey, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	if err := pd.Resolve(context.Background(), paging.DedupKey("acme", "k2")); err != nil {
		t.Fatal(err)
	}
	evs := f.got()
	if len(evs) != 2 {
		t.Fatalf("calls = %d, want 2", len(evs))
	}
	if ev := evs[1]; ev["event_action"] != "resolve" || ev["dedup_key"] != "recon:acme:k2" || ev["payload"] != nil {
		t.Errorf("event = %v", ev)
	}
}

func TestNewPagerDutyRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct{ name, url, key string }{
		{"no routing key", "https://pd.example/v2/enqueue", ""},
		{"relative url", "pd.example/" + routingKey, routingKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := paging.NewPagerDuty(paging.PagerDutyOptions{URL: tc.url, RoutingKey: tc.key})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), routingKey) {
				t.Errorf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestInvalidPage(t *testing.T) {
	f := newFakePD(t)
	pd, _ := paging.NewPagerDuty(paging.PagerDutyOptions{URL: f.srv.URL, RoutingKey: routingKey, Retry: fastRetry})
	for _, tc := range []struct {
		name string
		page paging.Page
	}{
		{"no dedup key", paging.Page{Summary: "x"}},
		{"bad severity", paging.Page{DedupKey: "recon:x", Severity: "loud"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := pd.Trigger(context.Background(), tc.page); !errors.Is(err, paging.ErrInvalidPage) {
				t.Fatalf("err = %v, want ErrInvalidPage", err)
			}
		})
	}
	if n := len(f.got()); n != 0 {
		t.Errorf("sent %d invalid pages", n)
	}
}

func TestDedupKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	for _, tc := range []struct{ name, tenant, key, want string }{
		{"short", "acme", "abc", "recon:acme:abc"},
		{"another tenant's same key", "globex", "abc", "recon:globex:abc"},
		{"fits", "acme", strings.Repeat("k", 244), "recon:acme:" + strings.Repeat("k", 244)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := paging.DedupKey(tc.tenant, tc.key); got != tc.want {
				t.Errorf("DedupKey = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("too long is hashed, deterministic, per tenant", func(t *testing.T) {
		got := paging.DedupKey("acme", long)
		if len(got) > paging.MaxDedupKeyLen || got != paging.DedupKey("acme", long) || !strings.HasPrefix(got, "recon:sha256:") {
			t.Errorf("DedupKey(long) = %q", got)
		}
		if got == paging.DedupKey("globex", long) {
			t.Errorf("two tenants share the dedup key %q", got)
		}
	})
}

func TestApprovalDedupKey(t *testing.T) {
	if got := paging.ApprovalDedupKey("acme", "abc"); got != "recon:acme:abc:approval" {
		t.Errorf("ApprovalDedupKey = %q", got)
	}
	if paging.ApprovalDedupKey("acme", "abc") == paging.DedupKey("acme", "abc") {
		t.Error("a row's approval request and its page share a dedup key")
	}
	// 244 fits DedupKey but not with the suffix: hashed, still apart from the page's.
	key := strings.Repeat("k", 244)
	got := paging.ApprovalDedupKey("acme", key)
	if len(got) > paging.MaxDedupKeyLen || !strings.HasPrefix(got, "recon:sha256:") || !strings.HasSuffix(got, ":approval") ||
		got != paging.ApprovalDedupKey("acme", key) || got == paging.ApprovalDedupKey("globex", key) {
		t.Errorf("ApprovalDedupKey(long) = %q", got)
	}
}

func TestWebhook(t *testing.T) {
	for _, tc := range []struct {
		name      string
		codes     []int
		wantErr   error
		wantCalls int
	}{
		{"200", []int{200}, nil, 1},
		{"503 then 204", []int{503, 204}, nil, 2},
		{"400 permanent", []int{400}, paging.ErrRejected, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakePD(t, tc.codes...)
			w, err := paging.NewWebhook(paging.WebhookOptions{URL: f.srv.URL + "/hooks/SeKrEt", Retry: fastRetry})
			if err != nil {
				t.Fatal(err)
			}
			err = w.Trigger(context.Background(), paging.Page{DedupKey: "recon:w", Summary: "hi", Severity: paging.SeverityCritical})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "SeKrEt") {
				t.Errorf("error leaks the url: %v", err)
			}
			evs := f.got()
			if len(evs) != tc.wantCalls {
				t.Fatalf("calls = %d, want %d", len(evs), tc.wantCalls)
			}
			if ev := evs[0]; ev["event_action"] != "trigger" || ev["dedup_key"] != "recon:w" || ev["severity"] != "critical" {
				t.Errorf("event = %v", ev)
			}
		})
	}
	t.Run("resolve", func(t *testing.T) {
		f := newFakePD(t)
		w, _ := paging.NewWebhook(paging.WebhookOptions{URL: f.srv.URL, Retry: fastRetry})
		if err := w.Resolve(context.Background(), "recon:w"); err != nil {
			t.Fatal(err)
		}
		if ev := f.got()[0]; ev["event_action"] != "resolve" || ev["dedup_key"] != "recon:w" {
			t.Errorf("event = %v", ev)
		}
	})
}

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	l := paging.NewLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	if err := l.Trigger(context.Background(), paging.Page{DedupKey: "recon:l", Summary: "row unknown", CustomDetails: map[string]any{"tenant": "acme"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Resolve(context.Background(), "recon:l"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`"dedup_key":"recon:l"`, `"summary":"row unknown"`, `"tenant":"acme"`, `"msg":"page resolved"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
