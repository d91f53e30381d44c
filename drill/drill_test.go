package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("DRILL_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestDrills runs every drill as `reconciler drill` does: all must pass.
func TestDrills(t *testing.T) {
	results, err := Run(context.Background(), Options{Logger: testLogger(t), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(results), len(drills); got != want {
		t.Fatalf("got %d results, want %d", got, want)
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
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
func TestDrillsCatchSabotage(t *testing.T) {
	for _, d := range drills {
		t.Run(d.name+"/"+d.sabotage, func(t *testing.T) {
			results, err := Run(context.Background(), Options{
				Only: []string{d.name}, Sabotage: d.sabotage, Logger: testLogger(t), TempDir: t.TempDir(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 {
				t.Fatalf("got %d results, want 1", len(results))
			}
			r := results[0]
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
			t.Logf("caught: %s", r.Detail)
		})
	}
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
}
