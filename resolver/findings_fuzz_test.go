package resolver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/resolver"
	"github.com/agentledger/reconciler/vendors"
)

// FuzzPagedFind feeds a vendor's first page (untrusted input) to a paged,
// filtered, grouped lookup (the mailgun preset's shape). Find must not
// panic, must never call outside api_base (a next URL elsewhere would carry
// our credential there), and a found object is one the page names with the
// row's local id.
func FuzzPagedFind(f *testing.F) {
	const local = "rl_0123456789abcdef0123456789abcdef"
	f.Add([]byte(`{"items":[{"event":"accepted","user-variables":{"metadata_local_id":"` + local + `"},"message":{"headers":{"message-id":"m1@x"}}}],"paging":{"next":"BASE/events/p2"}}`))
	f.Add([]byte(`{"items":[{"event":"rejected","user-variables":{"metadata_local_id":"` + local + `"},"message":{"headers":{"message-id":"m1@x"}}},{"event":"accepted","user-variables":{"metadata_local_id":"` + local + `"},"message":{"headers":{"message-id":"m2@x"}}}],"paging":{"next":"BASE/events/p2"}}`))
	f.Add([]byte(`{"items":[{"event":"accepted"}],"paging":{"next":"ELSEWHERE/steal"}}`))
	f.Add([]byte(`{"items":{"event":"accepted","user-variables":{"metadata_local_id":42}},"paging":{"next":7}}`))
	f.Add([]byte(`{"items":[null,1,"x",[]],"paging":null}`))
	f.Add([]byte(`[]`))
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	f.Cleanup(other.Close)
	var first atomic.Pointer[[]byte]
	var base string
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v3/mg.example.com/events" {
			b := strings.NewReplacer("BASE", base, "ELSEWHERE", other.URL).Replace(string(*first.Load()))
			_, _ = w.Write([]byte(b))
			return
		}
		_, _ = w.Write([]byte(`{"items":[],"paging":{"next":"` + base + `/events/end"}}`))
	}))
	f.Cleanup(vendor.Close)
	base = vendor.URL + "/v3/mg.example.com"
	doc := "vendors:\n  - name: mailgun\n    preset: mailgun\n    api_key: k\n    api_base: " + base + "\n    rate_limit: 100000/s\n    timeout: 2s\n"
	ps, err := vendors.Parse("fuzz.yaml", []byte(doc), vendors.Options{})
	if err != nil {
		f.Fatal(err)
	}
	lk, err := resolver.NewProfiled(ps[0], nil)
	if err != nil {
		f.Fatal(err)
	}
	row := ledger.Row{Tenant: "acme", Key: "k1", Vendor: "mailgun", MetadataLocalID: local, FirstSeenAt: time.Unix(1700000000, 0)}
	f.Fuzz(func(t *testing.T, page []byte) {
		first.Store(&page)
		fd, err := lk.Find(context.Background(), row)
		if elsewhere.Load() != 0 {
			t.Fatalf("Find called outside api_base for page %q", page)
		}
		if err == nil && fd.Found && fd.ReceiptID != "" && !strings.Contains(string(page), fd.ReceiptID) {
			t.Fatalf("found %q, which the page does not name", fd.ReceiptID)
		}
	})
}
