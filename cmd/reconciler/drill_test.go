package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/drill"
)

func TestRunDrill(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		sabotage   string
		wantCode   int
		wantStdout []string
		wantStderr string
	}{
		{name: "every drill passes", args: nil, wantCode: 0,
			wantStdout: append(drill.Names(), "13 drills, 0 failed, 0 skipped", "runtime go: 13 drills")},
		{name: "one drill passes", args: []string{"--run", "same-key-different-amount"}, wantCode: 0,
			wantStdout: []string{"DRILL", "same-key-different-amount", "PASS", "1 drills, 0 failed"}},
		{name: "json", args: []string{"--json", "--run", "model-reemits-new-ephemeral-args"}, wantCode: 0,
			wantStdout: []string{`"name": "model-reemits-new-ephemeral-args"`, `"pass": true`, `"side_effects": 1`}},
		{name: "a failing drill exits 1", args: []string{"--run", "same-key-different-amount"},
			sabotage: drill.SabotageSkipClaim, wantCode: 1,
			wantStdout: []string{"FAIL", "want 422 fingerprint_mismatch", "1 drills, 1 failed"}},
		{name: "list", args: []string{"--list"}, wantCode: 0, wantStdout: drill.Names()},
		{name: "profiled vendors", args: []string{"--vendors"}, wantCode: 0,
			wantStdout: append(drill.ProfiledNames(), "runtime go: 4 drills, 0 failed")},
		{name: "profiled vendors, sabotaged", args: []string{"--vendors", "--run", "profiled-slow-success-replay"},
			sabotage: drill.SabotageReplayFreshKey, wantCode: 1, wantStdout: []string{"FAIL", "Resend sent 2 emails, want 1"}},
		{name: "profiled vendors with another runtime", args: []string{"--vendors", "--runtime", "python"}, wantCode: 2,
			wantStderr: "--vendors runs with the Go runtime"},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantStdout: []string{"Usage:"}},
		{name: "unknown flag", args: []string{"--jsn"}, wantCode: 2, wantStderr: "flag provided but not defined"},
		{name: "unknown drill", args: []string{"--run", "nope"}, wantCode: 2, wantStderr: `no drill "nope"`},
		{name: "stray argument", args: []string{"all"}, wantCode: 2, wantStderr: `unexpected argument "all"`},
		{name: "bad timeout", args: []string{"--timeout", "0s"}, wantCode: 2, wantStderr: "--timeout must be positive"},
		{name: "unknown runtime", args: []string{"--runtime", "cobol"}, wantCode: 2, wantStderr: `no runtime "cobol" (have go, python, typescript)`},
		{name: "no clients", args: []string{"--runtime", "python", "--clients", "/nonexistent"}, wantCode: 1,
			wantStderr: "pass the repository's clients/ directory with --clients"},
		{name: "url without tool", args: []string{"--url", "http://127.0.0.1:1"}, wantCode: 2, wantStderr: "--url and --token go with --tool"},
		{name: "tool without token", args: []string{"--tool", "x", "--url", "http://127.0.0.1:1"}, wantCode: 1, wantStderr: "--tool needs the tenant's token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runDrillWith(context.Background(), tt.args, &stdout, &stderr,
				drill.Options{TempDir: t.TempDir(), Sabotage: tt.sabotage})
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			t.Logf("\n%s", stdout.String())
			for _, w := range tt.wantStdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr.String())
			}
		})
	}
}

// TestRunDrillRuntimes runs a drill with each runtime that can run here,
// its clients found from the working directory (cmd/reconciler) upwards.
func TestRunDrillRuntimes(t *testing.T) {
	for _, rt := range drill.Runtimes() {
		t.Run(rt, func(t *testing.T) {
			if err := drill.CheckRuntime(rt, ""); err != nil {
				t.Skipf("runtime %s cannot run here: %v", rt, err)
			}
			var stdout, stderr bytes.Buffer
			code := runDrillWith(context.Background(), []string{"--runtime", rt, "--run", "upstream-409-with-receipt"}, &stdout, &stderr,
				drill.Options{TempDir: t.TempDir()})
			if want := "runtime " + rt + ": 1 drills, 0 failed"; code != 0 || !strings.Contains(stdout.String(), want) {
				t.Fatalf("exit %d, want 0 and %q\nstdout:\n%s\nstderr:\n%s", code, want, stdout.String(), stderr.String())
			}
		})
	}
}

func TestRunDrillJSONIsAnArray(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runDrillWith(context.Background(), []string{"--json", "--run", "upstream-409-with-receipt"}, &stdout, &stderr,
		drill.Options{TempDir: t.TempDir()})
	var got []drill.Result
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not a JSON array of results: %v\n%s", err, stdout.String())
	}
	if code != 0 || len(got) != 1 || !got[0].Pass || got[0].SideEffects != got[0].Expected {
		t.Fatalf("exit %d, results %+v, stderr %s", code, got, stderr.String())
	}
}

// TestRunDrillRuntimesRunAutonomyDrills: the Python and TypeScript runners
// announce the approval and outbox steps, so those drills run (none is
// skipped) beside the base ones. (A runner that announces none skips them
// and still exits 0: drill's TestDrillsSkipWithoutCapability.)
func TestRunDrillRuntimesRunAutonomyDrills(t *testing.T) {
	for _, rt := range []string{drill.RuntimePython, drill.RuntimeTypeScript} {
		t.Run(rt, func(t *testing.T) {
			if err := drill.CheckRuntime(rt, ""); err != nil {
				t.Skipf("runtime %s cannot run here: %v", rt, err)
			}
			var stdout, stderr bytes.Buffer
			code := runDrillWith(context.Background(), []string{"--runtime", rt, "--run", "denied-never-calls", "--run", "upstream-409-with-receipt"},
				&stdout, &stderr, drill.Options{TempDir: t.TempDir()})
			if code != 0 || strings.Contains(stdout.String(), "SKIP") || !strings.Contains(stdout.String(), "2 drills, 0 failed, 0 skipped") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
		})
	}
}
