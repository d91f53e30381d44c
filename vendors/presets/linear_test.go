package presets_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// fakeLinear is Linear's GraphQL API at POST /graphql (Authorization: the
// API key as is): issueCreate(input:{id, title, teamId}) takes the issue's
// id from the client (a UUID v4; any other shape is an error) and a second
// create with an existing id is an error; issue(id:) reads an issue, an
// unknown id answering data null with errors[] — GraphQL answers errors
// with HTTP 200.
type fakeLinear struct {
	srv     *httptest.Server
	mu      sync.Mutex
	issues  map[string]string // id → title
	creates int
	refuse  bool // every create answers a GraphQL error
}

var uuid4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func newFakeLinear(t *testing.T) *fakeLinear {
	f := &fakeLinear{issues: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLinear) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != apiKey {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"message": "Authentication required, not authenticated", "extensions": map[string]any{"code": "AUTHENTICATION_ERROR"}}}})
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/graphql" {
		http.NotFound(w, r)
		return
	}
	var q struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		writeJSON(w, 400, map[string]any{"errors": []any{map[string]any{"message": "Body is not valid JSON"}}})
		return
	}
	gqlErr := func(msg string) {
		writeJSON(w, 200, map[string]any{"data": nil, "errors": []any{map[string]any{"message": msg, "extensions": map[string]any{"type": "invalid input"}}}})
	}
	switch {
	case strings.Contains(q.Query, "issueCreate"):
		f.creates++
		in, _ := q.Variables["input"].(map[string]any)
		id, _ := in["id"].(string)
		switch {
		case f.refuse:
			gqlErr("Team is archived")
		case !uuid4.MatchString(id):
			gqlErr("Argument Validation Error: id must be a UUID")
		case f.issues[id] != "":
			gqlErr("Entity already exists")
		default:
			title, _ := in["title"].(string)
			f.issues[id] = title
			writeJSON(w, 200, map[string]any{"data": map[string]any{"issueCreate": map[string]any{"success": true, "issue": map[string]any{"id": id, "identifier": "ENG-1"}}}})
		}
	case strings.Contains(q.Query, "issue("):
		id, _ := q.Variables["id"].(string)
		if f.issues[id] == "" {
			gqlErr("Entity not found: Issue")
			return
		}
		writeJSON(w, 200, map[string]any{"data": map[string]any{"issue": map[string]any{"id": id}}})
	default:
		gqlErr("unknown query")
	}
}

func linearRequest() *ledger.Request {
	return &ledger.Request{Method: "POST", Path: "/graphql", ContentType: "application/json",
		Body: `{"query":"mutation($input: IssueCreateInput!) { issueCreate(input: $input) { success issue { id identifier } } }","variables":{"input":{"title":"Fix login","teamId":"9cfb482a"}}}`}
}

func TestLinear(t *testing.T) {
	setup := func(t *testing.T) (*env, *fakeLinear) {
		f := newFakeLinear(t)
		return newEnv(t, newClock(), "linear", f.srv.URL, ""), f
	}
	t.Run("the vendor key is a UUID v4 the issue is created under, found by it", func(t *testing.T) {
		e, f := setup(t)
		req := linearRequest()
		row := e.claim(`{"title":"Fix login"}`, req)
		if !uuid4.MatchString(row.VendorKey) {
			t.Fatalf("vendor key %q is not a UUID v4", row.VendorKey)
		}
		if code, _ := e.send(row, f.srv.URL, req); code != 200 || f.issues[row.VendorKey] == "" {
			t.Fatalf("create: %d, issues %v", code, f.issues)
		}
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		if got.UpstreamReceiptID != row.VendorKey || f.creates != 1 {
			t.Errorf("receipt %q creates %d", got.UpstreamReceiptID, f.creates)
		}
	})
	t.Run("absent: the create is replayed with the same id, once", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"title":"Lost"}`, linearRequest())
		e.timedOut(row)
		e.pass(2 * time.Minute)
		got := e.row(row.Key)
		wantStatus(t, got, ledger.StatusSucceeded)
		e.pass(time.Hour)
		if f.creates != 1 || len(f.issues) != 1 || f.issues[row.VendorKey] != "Fix login" || got.UpstreamReceiptID != row.VendorKey {
			t.Errorf("creates %d issues %v receipt %q", f.creates, f.issues, got.UpstreamReceiptID)
		}
	})
	t.Run("a GraphQL error answer to the replay pages once", func(t *testing.T) {
		e, f := setup(t)
		f.refuse = true // e.g. the team was archived: every create is an error, with a 200
		row := e.claim(`{"title":"Refused"}`, linearRequest())
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(time.Hour)
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		if f.creates != 1 || e.pager.count() != 1 {
			t.Errorf("creates %d pages %d, want one replay and one page", f.creates, e.pager.count())
		}
	})
	t.Run("forever is not waited on: absent and no stored request pages once", func(t *testing.T) {
		e, f := setup(t)
		row := e.claim(`{"title":"No envelope"}`, nil)
		e.timedOut(row)
		e.pass(2 * time.Minute)
		e.pass(time.Hour)
		wantStatus(t, e.row(row.Key), ledger.StatusUnknown)
		if e.pager.count() != 1 || f.creates != 0 {
			t.Errorf("pages %d creates %d, want one page and no create", e.pager.count(), f.creates)
		}
	})
}
