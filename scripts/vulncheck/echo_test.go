package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The reasons .govulncheck-allow.yaml gives for echo's GO-2026-6875
// (Proxy middleware; v5's fix also touched Static, MethodOverride, Secure,
// Scheme, JSONP and static files) and GO-2026-6872 (RealIP without an
// IPExtractor, behind the rate limiter), each checked as stated there.
const (
	echoModule     = "github.com/labstack/echo/v4"
	echoMiddleware = echoModule + "/middleware"
)

// echoCalls are the echo methods and functions the advisories concern that
// our code could call directly. Matched by name on any receiver: a false
// alarm costs a look, a miss would make the reason untrue.
var echoCalls = map[string]string{
	"RealIP":                 "GO-2026-6872",
	"Scheme":                 "GO-2026-6875",
	"JSONP":                  "GO-2026-6875",
	"JSONPBlob":              "GO-2026-6875",
	"Static":                 "GO-2026-6875",
	"StaticFS":               "GO-2026-6875",
	"StaticDirectoryHandler": "GO-2026-6875",
}

// TestEchoAdvisoriesUnreachable: no package of the build, tests included,
// is echo's middleware, and only this module's packages import echo, so
// the middleware that calls RealIP and Scheme inside echo is not linked.
func TestEchoAdvisoriesUnreachable(t *testing.T) {
	root := moduleRoot(t)
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{else}}std{{end}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	self := goList(t, root, "-m")
	importers := 0
	for line := range strings.Lines(string(out)) {
		// "path [variant]" when a test recompiles it: keep the path.
		pkg, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(rest, "[") {
			_, rest, _ = strings.Cut(rest, "] ")
		}
		mod, imports, _ := strings.Cut(rest, " ")
		if isPkg(pkg, echoMiddleware) {
			t.Errorf("%s is in the build: GO-2026-6875 and GO-2026-6872's reasons no longer hold", pkg)
		}
		for imp := range strings.FieldsSeq(imports) {
			if !isPkg(imp, echoModule) || isPkg(pkg, echoModule) {
				continue
			}
			importers++
			if mod != self {
				t.Errorf("%s (module %s) imports %s: echo's advisories may be reached through it", pkg, mod, imp)
			}
		}
	}
	if importers == 0 {
		t.Fatal("no package imports echo: the go list output was not understood")
	}
}

// TestEchoAdvisorySymbolsNotCalled: our code calls none of the echo symbols
// the advisories concern and sets no IPExtractor.
func TestEchoAdvisorySymbolsNotCalled(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir // not compiled
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if id, bad := echoCalls[sel.Sel.Name]; bad {
						t.Errorf("%s: calls %s: %s's allow-list reason says we never do", fset.Position(n.Pos()), sel.Sel.Name, id)
					}
				}
			case *ast.Ident:
				if n.Name == "IPExtractor" {
					t.Errorf("%s: IPExtractor: GO-2026-6872's allow-list reason says we set none", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("parsed %d .go files under %s: not the whole module", files, root)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	return filepath.Dir(goList(t, ".", "-m", "-f", "{{.GoMod}}"))
}

func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// isPkg reports whether path is pkg or one of its subpackages.
func isPkg(path, pkg string) bool {
	return path == pkg || strings.HasPrefix(path, pkg+"/")
}
