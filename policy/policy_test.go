package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentledger/reconciler/ledger"
	"github.com/agentledger/reconciler/policy"
)

func TestCompileErrorsNamePositions(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"undeclared variable", `intent.amount <= 50000 && amout > 1`, `line 1, column 27: undeclared reference to 'amout'`},
		{"syntax", "intent.amount <=\n  && true", "line 2, column 3:"},
		{"not a bool", `intent.amount + 1`, "want a bool"},
		{"a string", `tenant`, "the expression is string, want a bool"},
		{"empty", "  ", "empty expression"},
		{"unknown function", `frobnicate(tool)`, "line 1, column 11: undeclared reference to 'frobnicate'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Compile(tt.src)
			if !errors.Is(err, ledger.ErrInvalidPolicy) || !errors.Is(err, ledger.ErrInvalid) {
				t.Fatalf("Compile(%q): got %v, want ErrInvalidPolicy", tt.src, err)
			}
			var ie *ledger.InvalidError
			if !errors.As(err, &ie) || ie.Field != "policy" {
				t.Fatalf("Compile(%q): %v does not name the policy field", tt.src, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile(%q): %q lacks %q", tt.src, err, tt.want)
			}
		})
	}
}

func mustCompile(t *testing.T, src string) *policy.Program {
	t.Helper()
	p, err := policy.Compile(src)
	if err != nil {
		t.Fatalf("Compile(%q): %v", src, err)
	}
	return p
}

func eval(t *testing.T, src, intent string) (bool, error) {
	t.Helper()
	return mustCompile(t, src).Eval(t.Context(), policy.Input{
		Tenant: "acme", RunID: "run_1", Tool: "stripe.payment_intents.create", Intent: json.RawMessage(intent),
	})
}

func TestEval(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		intent string
		want   bool
	}{
		{"the design's example, under the limit", `intent.amount <= 50000 && intent.currency == "usd"`, `{"amount": 1050, "currency": "usd"}`, true},
		{"over the limit", `intent.amount <= 50000 && intent.currency == "usd"`, `{"amount": 50001, "currency": "usd"}`, false},
		{"another currency", `intent.amount <= 50000 && intent.currency == "usd"`, `{"amount": 10, "currency": "eur"}`, false},
		{"a decimal against an int", `intent.amount <= 100`, `{"amount": 10.5}`, true},
		{"an int against a decimal", `intent.amount < 10.5`, `{"amount": 10}`, true},
		{"nested fields and lists", `intent.to.domain == "example.com" && size(intent.items) == 2`, `{"to": {"domain": "example.com"}, "items": [1, 2]}`, true},
		{"has() guards a missing field", `!has(intent.amount) || intent.amount < 5`, `{"to": "x"}`, true},
		{"the other variables", `tenant == "acme" && run_id.startsWith("run_") && tool.startsWith("stripe.")`, `{}`, true},
		{"a dyn that is a bool", `intent.approved`, `{"approved": true}`, true},
		{"a big integer stays exact", `intent.n == 9007199254740993`, `{"n": 9007199254740993}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := eval(t, tt.src, tt.intent)
			if err != nil || got != tt.want {
				t.Fatalf("Eval: got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// Every failure to evaluate is an error, never a true: the caller fails closed.
func TestEvalErrors(t *testing.T) {
	tests := []struct {
		name, src, intent string
	}{
		{"a missing field", `intent.amount < 100`, `{"currency": "usd"}`},
		{"a type mismatch", `intent.amount < 100`, `{"amount": "lots"}`},
		{"a dyn that is not a bool", `intent.approved`, `{"approved": "yes"}`},
		{"an intent that is not an object", `true`, `[1]`},
		{"over the cost limit", `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := eval(t, tt.src, tt.intent)
			if err == nil {
				t.Fatalf("Eval: got %v and no error, want an error", got)
			}
			if got {
				t.Fatal("Eval answered true with an error")
			}
		})
	}
	t.Run("a context already done", func(t *testing.T) {
		p := mustCompile(t, `[1,2,3].all(x, x > 0)`)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if got, err := p.Eval(ctx, policy.Input{Intent: json.RawMessage(`{}`)}); err == nil {
			t.Fatalf("Eval with a done context: %v and no error", got)
		}
	})
}

func TestProgramIsSafeForConcurrentUse(t *testing.T) {
	p := mustCompile(t, `intent.amount <= 50000`)
	done := make(chan error, 8)
	for i := range 8 {
		go func() {
			got, err := p.Eval(t.Context(), policy.Input{Intent: json.RawMessage(`{"amount": ` + strings.Repeat("9", i+1) + `}`)})
			if err == nil && got != (i < 4) {
				err = errors.New("wrong answer")
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if p.Source() != `intent.amount <= 50000` {
		t.Fatalf("Source: %q", p.Source())
	}
}
