package api

import (
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/agentledger/reconciler/ledger"
)

// The claim's answer is the API's most frequent body, and encoding/json's
// reflection over a row was a tenth of a claim's CPU in the handler
// (BENCHMARKS.md, issue 31). appendClaimResponse writes the same bytes by
// hand, the row through ledger.AppendRowJSON (ledger/rowjson.go says
// how). TestClaimJSONAsEncodingJSON holds it to encoding/json byte for
// byte.

// claimJSONBufs recycles the answers' buffers.
var claimJSONBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// writeClaimJSON answers a claim (writeJSON's contract: a request with a
// query goes through c.JSON, which honours ?pretty).
func writeClaimJSON(c echo.Context, code int, v claimResponse) error {
	if viaEchoJSON(c) {
		return c.JSON(code, v)
	}
	bp := claimJSONBufs.Get().(*[]byte)
	defer claimJSONBufs.Put(bp)
	b, err := appendClaimResponse((*bp)[:0], v)
	if err != nil {
		return writeJSON(c, code, v) // encoding/json's own error, as before
	}
	*bp = b
	_, err = startJSON(c, code).Write(b)
	return err
}

// appendClaimResponse appends v's JSON and a newline, as
// json.NewEncoder(w).Encode(v) writes it.
func appendClaimResponse(b []byte, v claimResponse) ([]byte, error) {
	var err error
	b = append(b, `{"decision":`...)
	b = ledger.AppendJSONString(b, string(v.Decision))
	if v.Code != "" {
		b = append(b, `,"code":`...)
		b = ledger.AppendJSONString(b, v.Code)
	}
	b = append(b, `,"row":`...)
	if v.Row == nil {
		b = append(b, "null"...)
	} else if b, err = ledger.AppendRowJSON(b, v.Row); err != nil {
		return nil, err
	}
	if v.ReplayWindowUntil != nil {
		b = append(b, `,"replay_window_until":`...)
		if b, err = ledger.AppendJSONTime(b, *v.ReplayWindowUntil); err != nil {
			return nil, err
		}
	}
	return append(b, "}\n"...), nil
}
