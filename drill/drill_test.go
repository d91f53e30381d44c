package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/ledger"
)

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("DRILL_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// runtimeOptions are the Options that drive the named runtime, or skip the
// test saying why that runtime cannot run here (no python3, no node, the
// TypeScript client not built). make test-python and make test-typescript
// run those drills through the binary, so CI never skips them.
func runtimeOptions(t *testing.T, name string) Options {
	t.Helper()
	launch, err := launcherFor(name, "")
	if err != nil {
		t.Skipf("runtime %s cannot run here: %v", name, err)
	}
	return Options{Runtime: name, launch: launch, Logger: testLogger(t), TempDir: t.TempDir()}
}

// TestDrills runs every drill as `reconciler drill --runtime R` does, for
// each runtime: all must pass.
func TestDrills(t *testing.T) {
	for _, rt := range Runtimes() {
		t.Run(rt, func(t *testing.T) {
			results, err := Run(context.Background(), runtimeOptions(t, rt))
			if err != nil {
				t.Fatal(err)
			}
			checkAllPass(t, results)
		})
	}
}

func checkAllPass(t *testing.T, results []Result) {
	t.Helper()
	if got, want := len(results), len(drills); got != want {
		t.Fatalf("got %d results, want %d", got, want)
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
			if r.Skipped {
				// Every runtime — the Go SDK, and the Python and TypeScript
				// runners — implements every protocol step: none may skip.
				t.Fatalf("the %s runtime skipped: %s", r.Runtime, r.Detail)
			}
			if !r.Pass {
				t.Errorf("FAIL: %s (side effects %d, expected %d)", r.Detail, r.SideEffects, r.Expected)
			}
			if r.SideEffects != r.Expected {
				t.Errorf("side effects %d, expected %d", r.SideEffects, r.Expected)
			}
		})
	}
	if !Passed(results) {
		var b bytes.Buffer
		_ = WriteTable(&b, results)
		t.Log("\n" + b.String())
	}
}

// TestDrillsCatchSabotage runs each drill against the unsafe variant that
// switches its protection off: each must FAIL, or the drill proves nothing.
// The sabotages live in the harness, made of the runtime's own operations,
// so each runtime runs them: a runner that dropped what a sabotage changes
// (a claim's key, a call's receipt paths) would let its drill pass. No
// runtime may skip one, and where a sabotage has a symptom of its own
// (caughtBy) the drill must fail on it, not on something else a runtime
// got wrong.
func TestDrillsCatchSabotage(t *testing.T) {
	for _, rt := range Runtimes() {
		t.Run(rt, func(t *testing.T) {
			if testing.Short() && rt != RuntimeGo {
				t.Skip("-short: the sabotages run with the Go runtime only")
			}
			base := runtimeOptions(t, rt)
			for _, d := range drills {
				t.Run(d.name+"/"+d.sabotage, func(t *testing.T) {
					o := base
					o.Only, o.Sabotage, o.TempDir = []string{d.name}, d.sabotage, t.TempDir()
					checkCaught(t, o, d)
				})
			}
		})
	}
}

// caughtBy is the check each autonomy drill's sabotage must trip, whatever
// the runtime: the vendor called while the approval was requested, after
// the denial, without the approval an open box asks for, or by each queued
// retry itself.
var caughtBy = map[string]string{
	SabotageCallBeforeApproval: "posts before the approval, want none",
	SabotageIgnoreDenial:       "posts, want none",
	SabotageIgnoreChecklist:    "never told await_approval",
	SabotageQueuedAsFailure:    "called=true",
}

func checkCaught(t *testing.T, o Options, d drill) {
	t.Helper()
	results, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("got %d results, want 1", len(results))
	}
	r := results[0]
	if r.Skipped {
		t.Fatalf("the %s runtime skipped the drill, so its sabotage was never tried: %s", r.Runtime, r.Detail)
	}
	if r.Pass {
		t.Fatalf("drill passed with %s switched off (side effects %d)", d.sabotage, r.SideEffects)
	}
	if r.Detail == "" {
		t.Error("a failed drill must say why")
	}
	// A drill that could not run has caught nothing: the failure
	// must be one of its checks, not its set-up.
	if strings.HasPrefix(r.Detail, "environment: ") || strings.Contains(r.Detail, "set-up: ") {
		t.Fatalf("drill failed for another reason than %s: %s", d.sabotage, r.Detail)
	}
	if want, ok := caughtBy[d.sabotage]; ok && !strings.Contains(r.Detail, want) {
		t.Fatalf("drill failed, but not on what %s breaks (%q): %s", d.sabotage, want, r.Detail)
	}
	t.Logf("caught: %s", r.Detail)
}

func TestSabotagesAreDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, d := range drills {
		if d.sabotage == "" {
			t.Errorf("drill %s has no sabotage", d.name)
		}
		if other, ok := seen[d.sabotage]; ok {
			t.Errorf("drills %s and %s share sabotage %s", other, d.name, d.sabotage)
		}
		seen[d.sabotage] = d.name
	}
}

func TestRunRefusesUnknownDrill(t *testing.T) {
	_, err := Run(context.Background(), Options{Only: []string{"no-such-drill"}})
	if err == nil || !strings.Contains(err.Error(), "no such drill") {
		t.Fatalf("got %v, want a no such drill error", err)
	}
}

// A runtime that cannot run is an error before any drill, saying what is
// missing; no drill result pretends it ran.
func TestRunRefusesRuntimeThatCannotRun(t *testing.T) {
	clients := t.TempDir()
	// A checkout whose TypeScript client was never built: the runner is
	// there, dist/ is not.
	unbuilt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(unbuilt, "typescript", "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unbuilt, "typescript", "scripts", "drill-runner.mjs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, runtime, clients, want string
	}{
		{"unknown", "cobol", "", `runtime "cobol": no such runtime (have go, python, typescript)`},
		{"no python client", RuntimePython, clients, "pass the repository's clients/ directory with --clients"},
		{"no typescript client", RuntimeTypeScript, clients, "pass the repository's clients/ directory with --clients"},
		{"typescript not built", RuntimeTypeScript, unbuilt, "run `npm ci && npm run build` in " + filepath.Join(unbuilt, "typescript")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results, err := Run(context.Background(), Options{Runtime: tt.runtime, ClientsDir: tt.clients})
			if err == nil || !strings.Contains(err.Error(), tt.want) || results != nil {
				t.Fatalf("got %v (%d results), want an error saying %q", err, len(results), tt.want)
			}
		})
	}
}

func TestOutput(t *testing.T) {
	results := []Result{
		{Name: "a", Pass: true, SideEffects: 1, Expected: 1},
		{Name: "b", Pass: false, SideEffects: 2, Expected: 1, Detail: "vendor created 2 objects, want 1"},
	}
	tests := []struct {
		name  string
		write func(*bytes.Buffer) error
		want  []string
	}{
		{"table", func(b *bytes.Buffer) error { return WriteTable(b, results) },
			[]string{"DRILL", "a  ", "PASS", "b  ", "FAIL", "vendor created 2 objects, want 1"}},
		{"json", func(b *bytes.Buffer) error { return WriteJSON(b, results) },
			[]string{`"name": "b"`, `"pass": false`, `"side_effects": 2`, `"expected": 1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.write(&b); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
	var back []Result
	var b bytes.Buffer
	_ = WriteJSON(&b, results)
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back) != 2 || back[1].Pass {
		t.Fatalf("json does not round-trip: %v %+v", err, back)
	}
	if Passed(results) || !Passed(results[:1]) || Passed(nil) {
		t.Error("Passed is wrong")
	}
	skipped := Result{Name: "c", Skipped: true, Detail: "the python runtime does not announce protocol step \"queued\""}
	if !Passed(append(results[:1:1], skipped)) || Passed([]Result{skipped}) {
		t.Error("Passed counts a skipped drill")
	}
	var b2 bytes.Buffer
	_ = WriteTable(&b2, []Result{skipped})
	if !strings.Contains(b2.String(), "SKIP") || !strings.Contains(b2.String(), "queued") {
		t.Errorf("a skipped drill's row: %s", b2.String())
	}
}

// TestDrillsSkipWithoutCapability: a runner that does not announce the
// protocol steps a drill needs has that drill skipped, saying which step,
// never failed and never passed; the drills of the base protocol run.
func TestDrillsSkipWithoutCapability(t *testing.T) {
	o := Options{Runtime: "go-runner", launch: testRunner(modeBase), Logger: testLogger(t), TempDir: t.TempDir(),
		Only: []string{"model-reemits-new-ephemeral-args", "irreversible-waits-for-approval", "denied-never-calls",
			"open-checklist-stays-gated", "outbox-three-retries-execute-once"}}
	results, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		wantSkip := r.Name != "model-reemits-new-ephemeral-args"
		if r.Skipped != wantSkip || (wantSkip && (r.Pass || !strings.Contains(r.Detail, "does not announce protocol step"))) {
			t.Errorf("%s: skipped=%v pass=%v detail %q", r.Name, r.Skipped, r.Pass, r.Detail)
		}
	}
	if !Passed(results) {
		t.Error("the drill that ran passed, but Passed says no")
	}
}

// TestDrillsOfATool: Options.Tool runs the drills that apply to the
// entry's class, vendor and effective autonomy, with the entry as
// registered, and skips the others saying why.
func TestDrillsOfATool(t *testing.T) {
	outbox := defaultTool()
	outbox.Name, outbox.Autonomy, outbox.Checklist.DuplicateDeliveryTest = "charge_later", ledger.AutonomyOutbox, false
	irreversible := defaultTool()
	irreversible.Name, irreversible.Vendor, irreversible.Class = "wire_transfer", "bank", ledger.ClassWriteIrreversible
	irreversible.KeyPlacement = ledger.KeyPlacement{BodyField: "reference"}
	for _, tc := range []struct {
		name string
		tool ledger.Tool
		runs []string
	}{
		{"outbox", outbox, []string{"open-checklist-stays-gated", "outbox-three-retries-execute-once"}},
		{"irreversible", irreversible, []string{"irreversible-waits-for-approval", "denied-never-calls", "open-checklist-stays-gated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results, err := Run(context.Background(), Options{Tool: &tc.tool, Logger: testLogger(t), TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			var ran []string
			for _, r := range results {
				if r.Skipped {
					if r.Detail == "" {
						t.Errorf("%s skipped without a reason", r.Name)
					}
					continue
				}
				ran = append(ran, r.Name)
				if !r.Pass {
					t.Errorf("%s: %s", r.Name, r.Detail)
				}
			}
			if strings.Join(ran, " ") != strings.Join(tc.runs, " ") {
				t.Fatalf("ran %v, want %v", ran, tc.runs)
			}
		})
	}
}
