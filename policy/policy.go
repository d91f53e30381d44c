package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/agentledger/reconciler/ledger"
)

// Evaluation limits.
const (
	// DefaultCostLimit bounds one evaluation's CEL cost (roughly the
	// operations it performs), as Kubernetes bounds an admission rule.
	DefaultCostLimit = 1_000_000
	// DefaultTimeout bounds one evaluation's time.
	DefaultTimeout = 100 * time.Millisecond
	// interruptEvery is how many comprehension iterations run between two
	// looks at the deadline.
	interruptEvery = 100
)

// env is the one CEL environment of every policy: its four variables.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("intent", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.StringType),
		cel.Variable("run_id", cel.StringType),
		cel.Variable("tenant", cel.StringType),
		// intent.amount <= 50000 compares whatever number the JSON held.
		cel.CrossTypeNumericComparisons(true),
	)
})

// Program is a compiled policy.
type Program struct {
	src string
	prg cel.Program
}

// Source returns the expression the program was compiled from.
func (p *Program) Source() string { return p.src }

// Compile checks src and compiles it. Errors match ledger.ErrInvalidPolicy
// (and ledger.ErrInvalid), and name each problem's line and column (both
// from 1).
func Compile(src string) (*Program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("policy environment: %w", err)
	}
	if strings.TrimSpace(src) == "" {
		return nil, ledger.ErrInvalidPolicy.With("empty expression")
	}
	ast, iss := e.Compile(src)
	if iss != nil && iss.Err() != nil {
		var msgs []string
		for _, ce := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("line %d, column %d: %s", ce.Location.Line(), ce.Location.Column()+1, ce.Message))
		}
		return nil, ledger.ErrInvalidPolicy.With("%s", strings.Join(msgs, "; "))
	}
	if out := ast.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
		return nil, ledger.ErrInvalidPolicy.With("the expression is %s, want a bool", out)
	}
	prg, err := e.Program(ast, cel.CostLimit(DefaultCostLimit), cel.InterruptCheckFrequency(interruptEvery))
	if err != nil {
		return nil, ledger.ErrInvalidPolicy.With("%v", err)
	}
	return &Program{src: src, prg: prg}, nil
}

// Input is what a policy reads of a claim.
type Input struct {
	Tenant, RunID, Tool string
	// Intent is the claim's intent: a JSON object.
	Intent json.RawMessage
}

// ErrNotBool means the expression evaluated to something other than a bool.
var ErrNotBool = errors.New("policy did not evaluate to a bool")

// Eval evaluates the policy for one claim within DefaultTimeout (or ctx's
// deadline, when sooner). An error means no answer: the caller must treat
// the claim as gated.
func (p *Program) Eval(ctx context.Context, in Input) (bool, error) {
	intent, err := decodeIntent(in.Intent)
	if err != nil {
		return false, err
	}
	// The deadline is looked at inside comprehensions only: a request
	// already given up on gets no answer either.
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("evaluate policy: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	out, _, err := p.prg.ContextEval(ctx, map[string]any{
		"intent": intent, "tool": in.Tool, "run_id": in.RunID, "tenant": in.Tenant,
	})
	if err != nil {
		return false, fmt.Errorf("evaluate policy: %w", err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w (got %s)", ErrNotBool, out.Type().TypeName())
	}
	return b, nil
}

// decodeIntent decodes the intent object with integers as int64 (CEL int)
// and other numbers as float64 (CEL double).
func decodeIntent(raw json.RawMessage) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode intent: %w", err)
	}
	m, ok := numbers(v).(map[string]any)
	if !ok {
		return nil, errors.New("decode intent: not a JSON object")
	}
	return m, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64() // JSON numbers always parse; a huge one is ±Inf
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}
