package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var today = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// A govulncheck stream as v1.9.0 writes it, cut down: GO-2026-6875 is
// reported at module, package and symbol level (twice), GO-2026-6842 only
// at module level (required, not called).
const stream = `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck","scanner_version":"v1.9.0","db":"file:///cache/db","go_version":"go1.27.3","scan_level":"symbol","scan_mode":"source"}}
{"progress":{"message":"Scanning your code and 300 packages across 40 dependent modules for known vulnerabilities..."}}
{"osv":{"id":"GO-2026-6875","summary":"Reverse Proxy Forwards Attacker-Supplied X-Real-IP"}}
{"osv":{"id":"GO-2026-6842","summary":"Echo: Decompress permits unbounded gzip expansion"}}
{"finding":{"osv":"GO-2026-6842","fixed_version":"v4.16.1","trace":[{"module":"github.com/labstack/echo/v4","version":"v4.16.0"}]}}
{"finding":{"osv":"GO-2026-6875","trace":[{"module":"github.com/labstack/echo/v4","version":"v4.16.0"}]}}
{"finding":{"osv":"GO-2026-6875","trace":[{"module":"github.com/labstack/echo/v4","version":"v4.16.0","package":"github.com/labstack/echo/v4"}]}}
{"finding":{"osv":"GO-2026-6875","trace":[
 {"module":"github.com/labstack/echo/v4","version":"v4.16.0","package":"github.com/labstack/echo/v4","function":"POST","receiver":"*Echo"},
 {"module":"github.com/agentledger/reconciler","package":"github.com/agentledger/reconciler/webhooks","function":"Register","receiver":"*Handler","position":{"filename":"webhooks/handler.go","line":267}}]}}
{"finding":{"osv":"GO-2026-6875","trace":[
 {"module":"github.com/labstack/echo/v4","version":"v4.16.0","package":"github.com/labstack/echo/v4","function":"GET","receiver":"*Echo"},
 {"module":"github.com/agentledger/reconciler","package":"github.com/agentledger/reconciler/api","function":"routes","receiver":"*Server","position":{"filename":"api/server.go","line":212}}]}}
`

func mustScan(t *testing.T, in string) scan {
	t.Helper()
	s, err := readScan(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReadScan(t *testing.T) {
	s := mustScan(t, stream)
	if got, want := s.Scanner+" "+s.GoVersion+" "+s.DB, "govulncheck v1.9.0 go1.27.3 file:///cache/db"; got != want {
		t.Errorf("config = %q, want %q", got, want)
	}
	if len(s.Called) != 1 || s.Called["GO-2026-6875"] == nil {
		t.Fatalf("called = %v, want GO-2026-6875 only", s.Called)
	}
	v := s.Called["GO-2026-6875"]
	if got, want := v.Trace, "api.Server.routes (api/server.go:212) → echo.Echo.GET"; got != want {
		t.Errorf("trace = %q, want the smallest, %q", got, want)
	}
	if got, want := v.Module+" "+v.Summary, "github.com/labstack/echo/v4@v4.16.0 Reverse Proxy Forwards Attacker-Supplied X-Real-IP"; got != want {
		t.Errorf("called = %q, want %q", got, want)
	}
	if len(s.Uncalled) != 1 || s.Uncalled["GO-2026-6842"].Fixed != "v4.16.1" {
		t.Errorf("uncalled = %v, want GO-2026-6842 fixed in v4.16.1 (and not the called one)", s.Uncalled)
	}
}

func TestReadScanRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         "",
		"no config":     `{"finding":{"osv":"GO-2026-6875","trace":[{"module":"m","version":"v1.0.0"}]}}`,
		"package level": `{"config":{"scan_level":"package"}}`,
		"not JSON":      "govulncheck: loading packages: exit status 1",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := readScan(strings.NewReader(in)); err == nil {
				t.Error("readScan = nil error: a scan that says nothing must not pass")
			}
		})
	}
}

func TestParseAllow(t *testing.T) {
	const ok = "- id: GO-2026-6875\n  review_by: 2027-03-01\n  reason: >-\n    not reached\n    by us\n"
	allow, err := parseAllow([]byte(ok), today)
	if err != nil {
		t.Fatal(err)
	}
	if len(allow) != 1 || allow[0].Reason != "not reached by us" || !allow[0].reviewBy.Equal(time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("allow = %+v", allow)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"bad id":        {"- id: CVE-2026-1\n  review_by: 2027-03-01\n  reason: x\n", "not a Go vulnerability id"},
		"twice":         {ok + ok, "listed twice"},
		"no reason":     {"- id: GO-2026-6875\n  review_by: 2027-03-01\n", "no reason"},
		"no date":       {"- id: GO-2026-6875\n  reason: x\n", "not a date"},
		"bad date":      {"- id: GO-2026-6875\n  review_by: 1 March 2027\n  reason: x\n", "not a date"},
		"too far":       {"- id: GO-2026-6875\n  review_by: 2028-01-01\n  reason: x\n", "more than a year ahead"},
		"unknown field": {"- id: GO-2026-6875\n  review_by: 2027-03-01\n  reason: x\n  owner: me\n", "owner"},
		"not a list":    {"id: GO-2026-6875\n", "cannot unmarshal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseAllow([]byte(tc.in), today)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseAllow = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if allow, err := parseAllow([]byte("# nothing accepted\n"), today); err != nil || len(allow) != 0 {
		t.Errorf("empty list = %v, %v; want none, nil", allow, err)
	}
}

func TestCheck(t *testing.T) {
	s := mustScan(t, stream)
	reviewed := func(id, by string) entry {
		d, err := time.Parse(time.DateOnly, by)
		if err != nil {
			t.Fatal(err)
		}
		return entry{ID: id, Reason: "reviewed", ReviewBy: by, reviewBy: d}
	}
	for name, tc := range map[string]struct {
		allow []entry
		want  []string // one substring per problem, in order
	}{
		"allowed":             {[]entry{reviewed("GO-2026-6875", "2027-03-01")}, nil},
		"review day itself":   {[]entry{reviewed("GO-2026-6875", "2026-12-01")}, nil},
		"not in the list":     {nil, []string{"GO-2026-6875 is called and not in the allow-list: Reverse Proxy Forwards Attacker-Supplied X-Real-IP (github.com/labstack/echo/v4@v4.16.0, fixed in none)"}},
		"review date passed":  {[]entry{reviewed("GO-2026-6875", "2026-11-30")}, []string{"GO-2026-6875 was to be reviewed by 2026-11-30"}},
		"stale entry":         {[]entry{reviewed("GO-2026-6875", "2027-03-01"), reviewed("GO-2026-6872", "2027-03-01")}, []string{"GO-2026-6872 is in the allow-list but no longer called"}},
		"uncalled not judged": {[]entry{reviewed("GO-2026-6875", "2027-03-01"), reviewed("GO-2026-6842", "2027-03-01")}, []string{"GO-2026-6842 is in the allow-list but no longer called"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := check(s, tc.allow, today)
			if len(got) != len(tc.want) {
				t.Fatalf("check = %v, want %d problems", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].Error(), w) {
					t.Errorf("problem %d = %q, want %q in it", i, got[i], w)
				}
			}
		})
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "- id: GO-2026-6875\n  review_by: 2027-03-01\n  reason: not reached\n")
	empty := write("empty.yaml", "")
	bad := write("bad.yaml", "- id: nope\n")
	now := today.Add(15 * time.Hour)
	for name, tc := range map[string]struct {
		allow, in  string
		code       int
		out, inErr string
	}{
		"pass":         {good, stream, 0, "GO-2026-6875 github.com/labstack/echo/v4@v4.16.0, fixed in none: allowed, review by 2027-03-01", ""},
		"fail":         {empty, stream, 1, "GO-2026-6875 github.com/labstack/echo/v4@v4.16.0, fixed in none: NOT ALLOWED", "vulncheck: FAIL"},
		"bad list":     {bad, stream, 2, "", "not a Go vulnerability id"},
		"missing list": {filepath.Join(dir, "none.yaml"), stream, 2, "", "no such file"},
		"no scan":      {good, "", 2, "", "no config message"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(strings.NewReader(tc.in), &stdout, &stderr, tc.allow, now)
			if code != tc.code {
				t.Errorf("run = %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.out) {
				t.Errorf("stdout = %q, want %q in it", stdout.String(), tc.out)
			}
			if !strings.Contains(stderr.String(), tc.inErr) {
				t.Errorf("stderr = %q, want %q in it", stderr.String(), tc.inErr)
			}
		})
	}
}
