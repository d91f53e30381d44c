package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentledger/reconciler/ledger"
)

// apiAnswer is what an in-process API call answered.
type apiAnswer struct {
	Status int
	Body   []byte
}

// errorMessage is the API's error text ({"error": {"code", "message"}}),
// safe to show: the API never puts internal text in an answer.
func (a apiAnswer) errorMessage() string {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(a.Body, &b) == nil && b.Error.Code != "" {
		return fmt.Sprintf("%s (%s, HTTP %d)", b.Error.Message, b.Error.Code, a.Status)
	}
	return fmt.Sprintf("HTTP %d", a.Status)
}

// recorder is the ResponseWriter of an in-process API call.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// call sends one request to the API as the signed-in person: their token
// in the Authorization header, exactly as the CLI sends it, so the API's
// authentication, checks, logs, metrics and spans are the ones a curl
// gets. The console's request supplies the context (its deadline, its
// cancellation) and the remote address.
func (c *Console) call(ctx context.Context, orig *http.Request, s *session, method, path string, body any) (apiAnswer, error) {
	var rd *bytes.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return apiAnswer{}, err
		}
		rd = bytes.NewReader(data)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("User-Agent", "reconciler-console")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = orig.RemoteAddr
	if tp := orig.Header.Get("traceparent"); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	rec := &recorder{h: http.Header{}}
	c.o.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return apiAnswer{Status: rec.status, Body: rec.body.Bytes()}, nil
}

// note reads the form's required note.
func note(r *http.Request) (string, bool) {
	n := strings.TrimSpace(r.PostFormValue("note"))
	return n, n != ""
}

// done records an action's result for the next page and sends the
// browser back (303: a reload does not post again).
func (c *Console) done(w http.ResponseWriter, r *http.Request, s *session, back string, ok bool, text string) {
	c.sessions.addFlash(s, flash{OK: ok, Text: text})
	if !strings.HasPrefix(back, "/console/") || strings.HasPrefix(back, "//") {
		back = "/console/attention"
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// act runs one API call for a form and reports it; every action is logged
// with the actor and the deciding token's fingerprint (never the token).
func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session, back, what, method, path string, body any, wantStatus ...int) {
	ans, err := c.call(r.Context(), r, s, method, path, body)
	if err != nil {
		c.log.Error("console: api call", "action", what, "err", err)
		c.done(w, r, s, back, false, what+": failed: the request could not be made")
		return
	}
	ok := false
	for _, st := range wantStatus {
		ok = ok || ans.Status == st
	}
	c.log.Info("console: action", "action", what, "actor", s.actor, "by", s.id.Fingerprint, "status", ans.Status)
	if !ok {
		c.done(w, r, s, back, false, what+": refused: "+ans.errorMessage())
		return
	}
	c.done(w, r, s, back, true, what+": done")
}

// rowBack is the row page of a form's tenant and key.
func rowBack(tenant, key string) string {
	return "/console/row?" + url.Values{"tenant": {tenant}, "key": {key}}.Encode()
}

// resolve is POST /console/actions/resolve: POST /v1/claims/{key}/resolve
// (admin), status succeeded with a receipt id or failed_poison.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, key := r.PostFormValue("tenant"), r.PostFormValue("key")
	back := rowBack(tenant, key)
	if !s.canSee(tenant) || ledger.ValidateKey(key) != nil {
		c.done(w, r, s, "/console/attention", false, "Resolve: no such row")
		return
	}
	n, ok := note(r)
	if !ok {
		c.done(w, r, s, back, false, "Resolve: a note is required: say why")
		return
	}
	status := ledger.Status(r.PostFormValue("status"))
	receipt := strings.TrimSpace(r.PostFormValue("receipt_id"))
	if status != ledger.StatusSucceeded && status != ledger.StatusFailedPoison {
		c.done(w, r, s, back, false, "Resolve: choose succeeded or failed_poison")
		return
	}
	if status == ledger.StatusSucceeded && receipt == "" {
		c.done(w, r, s, back, false, "Resolve: a success needs the vendor's receipt id")
		return
	}
	c.act(w, r, s, back, "Resolve as "+string(status), http.MethodPost, "/v1/claims/"+url.PathEscape(key)+"/resolve",
		map[string]string{"tenant": tenant, "status": string(status), "receipt_id": receipt, "note": n, "actor": s.actor}, http.StatusOK)
}

// approve and deny are POST /console/actions/approve|deny:
// POST /v1/approvals/{id}/approve|deny as the approver.
func (c *Console) approve(w http.ResponseWriter, r *http.Request, s *session) {
	c.decide(w, r, s, "approve")
}
func (c *Console) deny(w http.ResponseWriter, r *http.Request, s *session) { c.decide(w, r, s, "deny") }

func (c *Console) decide(w http.ResponseWriter, r *http.Request, s *session, verdict string) {
	tenant, key := r.PostFormValue("tenant"), r.PostFormValue("key")
	back := r.PostFormValue("back")
	if back == "" {
		back = rowBack(tenant, key)
	}
	if !s.canSee(tenant) || ledger.ValidateTenant(tenant) != nil || ledger.ValidateKey(key) != nil {
		c.done(w, r, s, "/console/attention", false, "Decide: no such approval")
		return
	}
	n, ok := note(r)
	if !ok {
		c.done(w, r, s, back, false, "Decide: a note is required: say why")
		return
	}
	id := ledger.ApprovalID(tenant, key)
	what := map[string]string{"approve": "Approve", "deny": "Deny"}[verdict]
	c.act(w, r, s, back, what, http.MethodPost, "/v1/approvals/"+id+"/"+verdict,
		map[string]string{"actor": s.actor, "note": n}, http.StatusOK)
}

// freeze and unfreeze are POST /console/actions/freeze|unfreeze: PUT and
// DELETE /v1/admin/freezes/{tenant}/{target}. The API's DELETE takes no
// body, so an unfreeze's note is in the console's log line only.
func (c *Console) freeze(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, target := r.PostFormValue("tenant"), strings.TrimSpace(r.PostFormValue("target"))
	back := r.PostFormValue("back")
	if back == "" {
		back = "/console/tools?" + url.Values{"tenant": {tenant}}.Encode()
	}
	if !s.canSee(tenant) || ledger.ValidateFreezeID(tenant, target) != nil {
		c.done(w, r, s, back, false, "Freeze: name a tool or a tool class of a tenant you may see")
		return
	}
	n, ok := note(r)
	if !ok {
		c.done(w, r, s, back, false, "Freeze: a note is required: say why")
		return
	}
	c.act(w, r, s, back, "Freeze "+target, http.MethodPut, "/v1/admin/freezes/"+tenant+"/"+target,
		map[string]string{"actor": s.actor, "note": n}, http.StatusOK)
}

func (c *Console) unfreeze(w http.ResponseWriter, r *http.Request, s *session) {
	tenant, target := r.PostFormValue("tenant"), strings.TrimSpace(r.PostFormValue("target"))
	back := r.PostFormValue("back")
	if back == "" {
		back = "/console/tools?" + url.Values{"tenant": {tenant}}.Encode()
	}
	if !s.canSee(tenant) || ledger.ValidateFreezeID(tenant, target) != nil {
		c.done(w, r, s, back, false, "Unfreeze: no such freeze")
		return
	}
	n, ok := note(r)
	if !ok {
		c.done(w, r, s, back, false, "Unfreeze: a note is required: say why")
		return
	}
	c.log.Info("console: unfreeze", "tenant", tenant, "target", target, "actor", s.actor, "note", n, "by", s.id.Fingerprint)
	c.act(w, r, s, back, "Unfreeze "+target, http.MethodDelete, "/v1/admin/freezes/"+tenant+"/"+target, nil, http.StatusNoContent)
}

// redrive is POST /console/actions/redrive: POST /v1/admin/redrive. Its
// note, like an unfreeze's, is in the console's log line.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, s *session) {
	back := "/console/attention"
	n, ok := note(r)
	if !ok {
		c.done(w, r, s, back, false, "Redrive: a note is required: say why")
		return
	}
	c.log.Info("console: redrive", "actor", s.actor, "note", n, "by", s.id.Fingerprint)
	c.act(w, r, s, back, "Redrive", http.MethodPost, "/v1/admin/redrive", nil, http.StatusOK)
}
