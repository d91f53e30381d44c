package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// writeJSON answers exactly what c.JSON answers: status, headers and
// bytes, with and without a query (?pretty indents).
func TestWriteJSONAsEcho(t *testing.T) {
	row := ledger.Row{Tenant: "acme", Key: "k1", Status: ledger.StatusPending, Attempt: 1,
		FirstSeenAt: time.Date(2026, 12, 3, 12, 0, 0, 5, time.UTC), Tool: "a<b>&c"}
	v := newClaimResponse(ledger.ClaimResult{Decision: ledger.DecisionProceed, Row: row, Inserted: true})
	for _, target := range []string{"/v1/claims", "/v1/claims?pretty", "/v1/claims?wait=1s"} {
		t.Run(target, func(t *testing.T) {
			e := echo.New()
			answer := func(write func(echo.Context) error) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				c := e.NewContext(httptest.NewRequest(http.MethodPost, target, nil), rec)
				if err := write(c); err != nil {
					t.Fatal(err)
				}
				return rec
			}
			want := answer(func(c echo.Context) error { return c.JSON(http.StatusCreated, v) })
			got := answer(func(c echo.Context) error { return writeJSON(c, http.StatusCreated, v) })
			if got.Code != want.Code || got.Body.String() != want.Body.String() ||
				got.Header().Get(echo.HeaderContentType) != want.Header().Get(echo.HeaderContentType) {
				t.Fatalf("writeJSON: %d %q %q\nc.JSON: %d %q %q", got.Code, got.Header().Get(echo.HeaderContentType), got.Body,
					want.Code, want.Header().Get(echo.HeaderContentType), want.Body)
			}
		})
	}
}
