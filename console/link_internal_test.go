package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzLinkFrom: whatever a vendor's receipt id holds (it comes from the
// vendor, a webhook or a runtime), the link stays on the template's host
// and under its path.
func FuzzLinkFrom(f *testing.F) {
	for _, s := range []string{"pi_3Nabc", "../../admin", "x/../../y", "https://evil.example/", "?a=b#c", "%2F", `"><script>`, "a b", "\x00"} {
		f.Add(s)
	}
	const tmpl = "https://dashboard.stripe.com/payments/{receipt_id}?from=console"
	f.Fuzz(func(t *testing.T, receipt string) {
		link := linkFrom(tmpl, "{receipt_id}", receipt)
		if receipt == "" {
			if link != "" {
				t.Fatalf("an empty receipt makes a link: %q", link)
			}
			return
		}
		u, err := url.Parse(link)
		if err != nil {
			t.Fatalf("link %q: %v", link, err)
		}
		if u.Scheme != "https" || u.Host != "dashboard.stripe.com" || !strings.HasPrefix(u.EscapedPath(), "/payments/") ||
			strings.Count(u.EscapedPath(), "/") != 2 || u.RawQuery != "from=console" || u.Fragment != "" {
			t.Fatalf("receipt %q makes %q", receipt, link)
		}
		if got, err := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/payments/")); err != nil || got != receipt {
			t.Fatalf("receipt %q reads back as %q (%v)", receipt, got, err)
		}
	})
}

func TestSameOrigin(t *testing.T) {
	cases := []struct {
		origin, host string
		want         bool
	}{
		{"", "h:1", true}, // no Origin: an old browser; CSRF token and SameSite still apply
		{"http://h:1", "h:1", true},
		{"https://h:1", "h:1", true},
		{"http://h:2", "h:1", false},
		{"http://evil.example", "h:1", false},
		{"null", "h:1", false},
		{"h:1", "h:1", false},
	}
	for _, tc := range cases {
		r := &requestStub{origin: tc.origin, host: tc.host}
		if got := sameOrigin(r.request()); got != tc.want {
			t.Errorf("Origin %q, Host %q: %v, want %v", tc.origin, tc.host, got, tc.want)
		}
	}
}

func TestTraceID(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"": "", "00-short-00f067aa0ba902b7-01": "", "garbage": "",
	} {
		if got := traceID(tp); got != want {
			t.Errorf("traceID(%q) = %q, want %q", tp, got, want)
		}
	}
}

type requestStub struct{ origin, host string }

func (s *requestStub) request() *http.Request {
	r := httptest.NewRequest(http.MethodPost, "http://"+s.host+"/console/actions/redrive", nil)
	if s.origin != "" {
		r.Header.Set("Origin", s.origin)
	}
	r.Host = s.host
	return r
}
