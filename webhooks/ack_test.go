package webhooks

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/internal/httpbody"
)

// TestAckJSONMatchesEcho: the acknowledgement built without reflection is
// byte for byte what c.JSON writes, headers included, and it stands aside
// where c.JSON would write something else.
func TestAckJSONMatchesEcho(t *testing.T) {
	for _, tc := range []struct {
		name, target, result string
		debug, fast          bool
	}{
		{"accepted", "/", "accepted", false, true},
		{"duplicate", "/", "duplicate", false, true},
		{"foreign tenant read as orphan", "/", publicResult("foreign_tenant"), false, true},
		{"verify-only's result", "/", "verified", false, true},
		{"pretty query", "/?pretty", "accepted", false, false},
		{"any query", "/?x=1", "accepted", false, false},
		{"echo debug", "/", "accepted", true, false},
		{"html escaped by encoding/json", "/", "a<b", false, false},
		{"quote", "/", `a"b`, false, false},
		{"upper case", "/", "Accepted", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := echo.New()
			e.Debug = tc.debug
			want := httptest.NewRecorder()
			if err := e.NewContext(httptest.NewRequest(http.MethodPost, tc.target, nil), want).JSON(http.StatusOK, ackBody{Result: tc.result}); err != nil {
				t.Fatal(err)
			}
			b, ok := ackJSON(e.NewContext(httptest.NewRequest(http.MethodPost, tc.target, nil), httptest.NewRecorder()), tc.result)
			if ok != tc.fast {
				t.Fatalf("ackJSON ok = %v, want %v", ok, tc.fast)
			}
			if !ok {
				return
			}
			got := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodPost, tc.target, nil), got)
			if err := c.JSONBlob(http.StatusOK, b); err != nil {
				t.Fatal(err)
			}
			if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
				t.Fatalf("got %d %q %q, want %d %q %q", got.Code, got.Header().Get("Content-Type"), got.Body, want.Code, want.Header().Get("Content-Type"), want.Body)
			}
		})
	}
}

// TestReadAllMatchesIOReadAll: the body read with its announced length is
// io.ReadAll's, whatever the announcement and however the reader splits it.
func TestReadAllMatchesIOReadAll(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 130) // 2 KB, a Stripe event's size
	errBroken := errors.New("broken")
	for _, tc := range []struct {
		name string
		size int64
		r    func() io.Reader
	}{
		{"exact", int64(len(body)), func() io.Reader { return strings.NewReader(body) }},
		{"unknown", -1, func() io.Reader { return strings.NewReader(body) }},
		{"announced short", 10, func() io.Reader { return strings.NewReader(body) }},
		{"announced long", 5000, func() io.Reader { return strings.NewReader(body) }},
		{"empty", 0, func() io.Reader { return strings.NewReader("") }},
		{"one byte at a time", int64(len(body)), func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }},
		{"data with EOF", int64(len(body)), func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) }},
		{"error midway", int64(len(body)), func() io.Reader { return io.MultiReader(strings.NewReader(body[:100]), iotest.ErrReader(errBroken)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := io.ReadAll(tc.r())
			got, gotErr := httpbody.ReadUpTo(tc.r(), math.MaxInt64, tc.size)
			if !bytes.Equal(got, want) || !errors.Is(gotErr, wantErr) || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("got %d bytes, %v; want %d bytes, %v", len(got), gotErr, len(want), wantErr)
			}
		})
	}
}
