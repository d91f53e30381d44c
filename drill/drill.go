package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentledger/reconciler/ledger"
)

// Options configure Run. The zero value runs every drill.
type Options struct {
	// Only names the drills to run (empty: all, in order).
	Only []string
	// Logger receives the components' logs (nil: discarded).
	Logger *slog.Logger
	// TempDir is where each drill's temporary directory is made (empty:
	// os.TempDir()).
	TempDir string
	// Timeout bounds each drill (default DefaultTimeout).
	Timeout time.Duration
	// Sabotage switches off one protection, for the tests that prove each
	// drill fails without it (see Sabotages). Never set it otherwise.
	Sabotage string
	// Runtime is the agent runtime the drills drive: RuntimeGo (empty),
	// RuntimePython or RuntimeTypeScript.
	Runtime string
	// Tool is a registered tool's entry to drill (`reconciler drill
	// --tool`): the world registers it, with its duplicate_delivery_test
	// box checked (the box the drills decide), and its calls name it; the
	// drills that do not apply to its class, vendor, key placement or
	// effective autonomy are skipped. Nil: the drills' own charge tool,
	// and every drill runs.
	Tool *ledger.Tool
	// ClientsDir is the repository's clients/ directory, where the Python
	// and TypeScript runtimes' runners are (empty: FindClients from the
	// working directory).
	ClientsDir string

	// launch starts each drill's runtime; Run sets it from Runtime (tests
	// set it to drive a runner of their own).
	launch launcher
}

// DefaultTimeout bounds one drill; a passing drill takes well under a second
// or two, so reaching it is a failure, never a wait that passes.
const DefaultTimeout = 15 * time.Second

// Result is what one drill saw.
type Result struct {
	Name string `json:"name"`
	// Runtime is the agent runtime the drill drove.
	Runtime string `json:"runtime"`
	Pass    bool   `json:"pass"`
	// Skipped is true when the drill did not run: the runtime does not
	// announce a protocol step it needs, or it does not apply to the tool
	// drilled. Detail says why; Pass is false, and Passed ignores it.
	Skipped bool `json:"skipped,omitempty"`
	// SideEffects is how many objects the fake vendor created (charges and
	// refunds); Expected is how many the protection allows.
	SideEffects int    `json:"side_effects"`
	Expected    int    `json:"expected"`
	Detail      string `json:"detail,omitempty"`
	// Seconds is how long the drill took, environment included.
	Seconds float64 `json:"seconds"`
}

// drill is one scenario: run builds its result from a fresh env; sabotage
// names the unsafe variant that must make it fail.
type drill struct {
	name     string
	summary  string
	sabotage string
	run      func(ctx context.Context, e *env) Result
	// needs are the runtime capabilities the drill's steps use (capQueued…).
	needs []string
	// applies says whether the drill means anything for a tool's entry
	// (Options.Tool), and why not; nil: for every write tool.
	applies func(t ledger.Tool) (bool, string)
}

// Names lists the drills in the order Run runs them.
func Names() []string {
	names := make([]string, len(drills))
	for i, d := range drills {
		names[i] = d.name
	}
	return names
}

// Run runs the drills one after another, each in a fresh environment (a
// bbolt ledger and an embedded NATS server on a random port in a new
// temporary directory, the real API and webhook handlers on a loopback
// server, a fault-injecting fake vendor, and the agent runtime o.Runtime
// names), and returns one Result per drill. A drill that fails is a Result
// with Pass false; the error is for a drill name that does not exist, a
// runtime that does not exist or cannot run here (no python3, no built
// TypeScript client), or a ctx that ended.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Runtime == "" {
		o.Runtime = RuntimeGo
	}
	if o.launch == nil {
		var err error
		if o.launch, err = launcherFor(o.Runtime, o.ClientsDir); err != nil {
			return nil, fmt.Errorf("drills: %w", err)
		}
	}
	for _, name := range o.Only {
		if !slices.Contains(Names(), name) {
			return nil, fmt.Errorf("drill %q: no such drill (have %s)", name, strings.Join(Names(), ", "))
		}
	}
	var out []Result
	for _, d := range drills {
		if len(o.Only) > 0 && !slices.Contains(o.Only, d.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("drills: %w", err)
		}
		out = append(out, runOne(ctx, d, o))
	}
	return out, nil
}

func runOne(ctx context.Context, d drill, o Options) Result {
	start := time.Now()
	skip := func(why string) Result {
		o.Logger.Info("drill skipped", "drill", d.name, "runtime", o.Runtime, "why", why)
		return Result{Name: d.name, Runtime: o.Runtime, Skipped: true, Detail: why, Seconds: time.Since(start).Seconds()}
	}
	if o.Tool != nil && d.applies != nil {
		if ok, why := d.applies(drilledEntry(*o.Tool)); !ok {
			return skip(why)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	log := o.Logger.With("drill", d.name, "runtime", o.Runtime)
	e, err := newEnv(ctx, Options{Logger: log, TempDir: o.TempDir, Sabotage: o.Sabotage, launch: o.launch, Tool: o.Tool})
	if err != nil {
		return Result{Name: d.name, Runtime: o.Runtime, Detail: "environment: " + err.Error(), Seconds: time.Since(start).Seconds()}
	}
	defer e.close()
	for _, c := range d.needs {
		if !e.rt.has(c) {
			return skip(fmt.Sprintf("the %s runtime does not announce protocol step %q", o.Runtime, c))
		}
	}
	r := d.run(ctx, e)
	r.Name, r.Runtime = d.name, o.Runtime
	r.Seconds = time.Since(start).Seconds()
	log.Info("drill done", "pass", r.Pass, "side_effects", r.SideEffects, "expected", r.Expected)
	return r
}

// DeliveryTested reports whether results hold a duplicate-delivery drill
// that ran and passed: the gate's drills (approval, denial, checklist)
// test the gate, not what a second delivery does, so they alone never
// justify the checklist's duplicate_delivery_test.
func DeliveryTested(results []Result) bool {
	for _, r := range results {
		if !r.Skipped && r.Pass && !gateDrills[r.Name] {
			return true
		}
	}
	return false
}

// gateDrills are the drills of the approval gate and the checklist.
var gateDrills = map[string]bool{
	"irreversible-waits-for-approval": true,
	"denied-never-calls":              true,
	"open-checklist-stays-gated":      true,
}

// Passed reports whether every drill that ran passed, and at least one
// ran (skipped drills are neither).
func Passed(results []Result) bool {
	ran := 0
	for _, r := range results {
		if r.Skipped {
			continue
		}
		if !r.Pass {
			return false
		}
		ran++
	}
	return ran > 0
}

// WriteTable prints one row per drill: name, PASS/FAIL, side effects seen,
// expected, and the detail of a failure.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DRILL\tRESULT\tSIDE EFFECTS\tEXPECTED\tDETAIL")
	for _, r := range results {
		verdict, detail := "PASS", ""
		switch {
		case r.Skipped:
			verdict, detail = "SKIP", r.Detail
		case !r.Pass:
			verdict, detail = "FAIL", r.Detail
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", r.Name, verdict, r.SideEffects, r.Expected, detail)
	}
	return tw.Flush()
}

// WriteJSON prints the results as one JSON array.
func WriteJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// checker collects a drill's failed expectations.
type checker struct{ fails []string }

// expect records msg when ok is false and returns ok.
func (c *checker) expect(ok bool, format string, args ...any) bool {
	if !ok {
		c.fails = append(c.fails, fmt.Sprintf(format, args...))
	}
	return ok
}

// abort finishes r as failed by an error of the drill's own set-up (a
// client, a pager, a lookup that cannot be built): a drill that could not
// run has not passed.
func (c *checker) abort(r Result, err error) Result {
	c.fails = append(c.fails, "set-up: "+err.Error())
	return c.result(r)
}

// result finishes r from the checks.
func (c *checker) result(r Result) Result {
	r.Pass = len(c.fails) == 0
	r.Detail = strings.Join(c.fails, "; ")
	return r
}
