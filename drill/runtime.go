package drill

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentledger/reconciler/client"
	"github.com/agentledger/reconciler/ledger"
)

// The agent runtimes a drill can drive (Options.Runtime).
const (
	// RuntimeGo is the Go SDK (client/), in-process, waiting on NATS.
	RuntimeGo = "go"
	// RuntimePython is clients/python (reconciler_client) through its
	// runner, clients/python/drill_runner.py; it needs python3.
	RuntimePython = "python"
	// RuntimeTypeScript is clients/typescript (@reconciler/client, its
	// built dist/) through its runner, clients/typescript/scripts/drill-runner.mjs;
	// it needs node.
	RuntimeTypeScript = "typescript"
)

// Runtimes lists the runtime names Options.Runtime takes.
func Runtimes() []string { return []string{RuntimeGo, RuntimePython, RuntimeTypeScript} }

// runtime is an agent runtime as the drills drive it: run performs one op
// and returns the runtime's answer, whose Error is how the op failed in
// the runtime's terms. run's own error is the runtime failing (a runner
// that died, a ctx that ended), never the op's outcome. Safe for
// concurrent use: the drills run several agents' ops at once.
type runtime interface {
	run(ctx context.Context, o op) (reply, error)
	// has reports whether the runtime implements a capability (capQueued…).
	has(capability string) bool
	close() error
}

// runtimeEnv is what a runtime is started with: where its agents find the
// API (agent a's base URL is URL + "/a"), the tenant's token, and the
// tenant's JetStream for the Go runtime's waits (the other clients wait
// by long poll only).
type runtimeEnv struct {
	URL   string
	Token string
	JS    jetstream.JetStream
	Log   *slog.Logger
}

// The client settings every runtime's agents use: short polls and waits
// so a drill never sits on a long poll, few and quick retries.
const (
	agentPollMS    = 50
	agentWaitMS    = 2000
	agentRetries   = 2
	agentBackoffMS = 20
)

// launcher starts the runtime of one drill environment.
type launcher func(ctx context.Context, re runtimeEnv) (runtime, error)

func launchGo(_ context.Context, re runtimeEnv) (runtime, error) { return newGoRuntime(re), nil }

// launcherFor checks that the named runtime can run here and returns how
// to start it. clientsDir is the repository's clients/ directory (empty:
// FindClients from the working directory); only python and typescript
// read it.
func launcherFor(name, clientsDir string) (launcher, error) {
	if name == "" || name == RuntimeGo {
		return launchGo, nil
	}
	if !slices.Contains(Runtimes(), name) {
		return nil, fmt.Errorf("runtime %q: no such runtime (have %s)", name, strings.Join(Runtimes(), ", "))
	}
	if clientsDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", name, err)
		}
		if clientsDir, err = FindClients(wd); err != nil {
			return nil, fmt.Errorf("runtime %s: %w", name, err)
		}
	}
	spec, err := runnerFor(name, clientsDir)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", name, err)
	}
	return func(ctx context.Context, re runtimeEnv) (runtime, error) { return startRunner(ctx, spec, re) }, nil
}

// CheckRuntime reports why the named runtime cannot run here (an unknown
// name, no python3 or node on PATH, no clients/ directory, the TypeScript
// client not built), or nil when it can. clientsDir is as Options.ClientsDir.
func CheckRuntime(name, clientsDir string) error {
	_, err := launcherFor(name, clientsDir)
	return err
}

// runnerFor is the command of a runtime's runner, once what it needs is
// found: the interpreter on PATH and the client's files under clientsDir.
func runnerFor(name, clientsDir string) (runnerSpec, error) {
	var (
		bin, script, hint string
		needs             []string
		env               []string
	)
	switch name {
	case RuntimePython:
		bin, script = "python3", filepath.Join(clientsDir, "python", "drill_runner.py")
		needs = []string{filepath.Join(clientsDir, "python", "reconciler_client", "__init__.py")}
		hint = "the Python client is missing: pass the repository's clients/ directory with --clients"
		// Importing the client must not write __pycache__ into the tree.
		env = []string{"PYTHONDONTWRITEBYTECODE=1"}
	case RuntimeTypeScript:
		bin, script = "node", filepath.Join(clientsDir, "typescript", "scripts", "drill-runner.mjs")
		needs = []string{filepath.Join(clientsDir, "typescript", "dist", "index.js")}
		hint = "the TypeScript client is not built: run `npm ci && npm run build` in " + filepath.Join(clientsDir, "typescript")
	}
	if _, err := os.Stat(script); err != nil {
		return runnerSpec{}, fmt.Errorf("no runner %s: pass the repository's clients/ directory with --clients", script)
	}
	for _, f := range needs {
		if _, err := os.Stat(f); err != nil {
			return runnerSpec{}, fmt.Errorf("%s is missing: %s", f, hint)
		}
	}
	if name == RuntimeTypeScript {
		// A dist/ older than the sources would drill yesterday's client.
		if err := builtAfter(filepath.Join(clientsDir, "typescript", "dist", "index.js"), filepath.Join(clientsDir, "typescript", "src")); err != nil {
			return runnerSpec{}, fmt.Errorf("%w: run `npm run build` in %s", err, filepath.Join(clientsDir, "typescript"))
		}
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return runnerSpec{}, fmt.Errorf("needs %s on PATH: %w", bin, err)
	}
	return runnerSpec{runtime: name, path: path, args: []string{script}, env: env}, nil
}

// builtAfter reports an error naming a file under src that is newer than
// the build output out.
func builtAfter(out, src string) error {
	o, err := os.Stat(out)
	if err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(o.ModTime()) {
			return fmt.Errorf("the TypeScript client's build is older than %s", p)
		}
		return nil
	})
}

// FindClients returns the clients/ directory of the repository that holds
// dir: dir/clients or that of the nearest parent, the first that has one of
// the runners (clients/python/drill_runner.py,
// clients/typescript/scripts/drill-runner.mjs).
func FindClients(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		c := filepath.Join(d, "clients")
		for _, runner := range []string{"python/drill_runner.py", "typescript/scripts/drill-runner.mjs"} {
			if _, err := os.Stat(filepath.Join(c, runner)); err == nil {
				return c, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no clients/ directory with a drill runner in %s or above: run from the repository or pass --clients DIR", dir)
		}
	}
}

// agent is one agent of a drill: a client instance of the drill's
// runtime, named so that the watch tells agents apart. Its methods are the
// runtime's ops, answered in the Go SDK's types and errors whatever the
// runtime: an UnsettledError matches client.ErrUnsettled, a 422 is a
// *client.Error matching client.ErrFingerprintMismatch, and so on.
type agent struct {
	rt   runtime
	name string
}

func (e *env) agent(name string) *agent { return &agent{rt: e.rt, name: name} }

func (a *agent) run(ctx context.Context, o op) (reply, error) {
	o.Agent = a.name
	ans, err := a.rt.run(ctx, o)
	if err != nil {
		return reply{}, fmt.Errorf("agent %s: %s: %w", a.name, o.Op, err)
	}
	return ans, nil
}

// do runs claim under the ledger with call as its vendor call: the SDK's Do.
func (a *agent) do(ctx context.Context, claim client.ClaimRequest, call vendorCall) (client.Outcome, error) {
	return a.doOp(ctx, op{Op: opDo, Claim: &claim, Call: &call})
}

// doWaitQueued is do that waits for a queued call's result (capQueued).
func (a *agent) doWaitQueued(ctx context.Context, claim client.ClaimRequest, call vendorCall) (client.Outcome, error) {
	return a.doOp(ctx, op{Op: opDo, Claim: &claim, Call: &call, WaitQueued: true})
}

func (a *agent) doOp(ctx context.Context, o op) (client.Outcome, error) {
	ans, err := a.run(ctx, o)
	if err != nil {
		return client.Outcome{}, err
	}
	return ans.Outcome.outcome(), ans.Error.err()
}

// claim asks once and calls nothing (a harness resuming by hand).
func (a *agent) claim(ctx context.Context, claim client.ClaimRequest) (client.ClaimResponse, error) {
	ans, err := a.run(ctx, op{Op: opClaim, Claim: &claim})
	if err != nil {
		return client.ClaimResponse{}, err
	}
	return ans.Claim.response(), ans.Error.err()
}

// call makes the vendor call alone with key and localID: the call a
// harness made before it crashed, or an unsafe runtime's. An error means
// no answer came.
func (a *agent) call(ctx context.Context, call vendorCall, key, localID string) (client.Result, error) {
	ans, err := a.run(ctx, op{Op: opCall, Call: &call, Key: key, LocalID: localID})
	if err != nil {
		return client.Result{}, err
	}
	var res client.Result
	if ans.Result != nil {
		res = ans.Result.result()
	}
	return res, ans.Error.err()
}

// report reports one call's outcome for key.
func (a *agent) report(ctx context.Context, key string, rep client.OutcomeReport) (ledger.Row, error) {
	ans, err := a.run(ctx, op{Op: opReport, Key: key, Outcome: &rep})
	if err != nil {
		return ledger.Row{}, err
	}
	return rowOf(ans), ans.Error.err()
}

// compensate claims the compensation action of key.
func (a *agent) compensate(ctx context.Context, key, action string) (client.ClaimResponse, error) {
	ans, err := a.run(ctx, op{Op: opCompensate, Key: key, Action: action})
	if err != nil {
		return client.ClaimResponse{}, err
	}
	return ans.Claim.response(), ans.Error.err()
}

// get reads the row of key.
func (a *agent) get(ctx context.Context, key string) (ledger.Row, error) {
	ans, err := a.run(ctx, op{Op: opGet, Key: key})
	if err != nil {
		return ledger.Row{}, err
	}
	return rowOf(ans), ans.Error.err()
}

// scrub is what the runtime does with a model's tool-call arguments
// before they become an intent.
func (a *agent) scrub(ctx context.Context, args map[string]any) (map[string]any, error) {
	ans, err := a.run(ctx, op{Op: opScrub, Args: args})
	if err != nil {
		return nil, err
	}
	if ans.Error == nil && ans.Args == nil {
		return nil, errors.New("scrub: the runtime answered no arguments")
	}
	return ans.Args, ans.Error.err()
}

func rowOf(ans reply) ledger.Row {
	if ans.Row == nil {
		return ledger.Row{}
	}
	return *ans.Row
}
