package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/internal/yamlnode"
)

// Error is one problem with the configuration. Where names its source:
// "reconciler.yaml:12" for the config file, "RECONCILER_HTTP" for the
// environment, "--http" for a flag, "" for a default or a value set in code.
// Messages never contain a secret's value.
type Error struct {
	Where string
	Path  string // the setting, spelled as in the file: stripe.endpoints[0].secrets
	Msg   string

	line int   // for sorting: the file's problems are reported top to bottom
	err  error // a sentinel for errors.Is, when there is one
}

func (e *Error) Unwrap() error { return e.err }

// errTooLarge stops loading before validation: the decoded leftovers of a
// document that blew the node budget would only produce noise.
var errTooLarge = errors.New("config document too large")

func (e *Error) Error() string {
	var b strings.Builder
	if e.Where != "" {
		b.WriteString(e.Where)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// origin records where each value of a Config came from. It is shared by the
// copies of a Config (it is written only while loading).
type origin struct {
	file   string
	lines  map[string]int    // path → line in file
	src    map[string]string // path → "RECONCILER_X" or "--x" for overrides
	failed map[string]bool   // paths that did not decode: validation skips them
}

func newOrigin(file string) *origin {
	return &origin{file: file, lines: map[string]int{}, src: map[string]string{}, failed: map[string]bool{}}
}

func (o *origin) at(line int) string {
	if o.file == "" {
		return "line " + strconv.Itoa(line)
	}
	return o.file + ":" + strconv.Itoa(line)
}

// where locates path, or its nearest ancestor that has a position (a missing
// key is reported at the mapping that lacks it).
func (o *origin) where(path string) string {
	if o == nil {
		return ""
	}
	for p := path; p != ""; p = parentPath(p) {
		if s, ok := o.src[p]; ok {
			return s
		}
		if l, ok := o.lines[p]; ok {
			return o.at(l)
		}
	}
	return ""
}

// lineOf is the file line where (path) reports, 0 for overrides and defaults.
func (o *origin) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if _, ok := o.src[p]; ok {
			return 0
		}
		if l, ok := o.lines[p]; ok {
			return l
		}
	}
	return 0
}

func (o *origin) line(path string) int {
	if o == nil {
		return 0
	}
	return o.lines[path]
}

// skip reports whether path or an ancestor failed to decode; its error is
// already reported and validating the leftover value would only add noise.
func (o *origin) skip(path string) bool {
	if o == nil {
		return false
	}
	for p := path; p != ""; p = parentPath(p) {
		if o.failed[p] {
			return true
		}
	}
	return false
}

func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// Limits that keep a hostile or broken file from costing much: aliases can
// make a small document expand to millions of nodes.
const (
	maxNodes     = 100_000
	maxErrors    = 50
	maxFileBytes = 4 << 20
)

// decodeYAML overlays the YAML document data onto c. The document is parsed
// into a yaml.Node tree first and walked against Config's yaml tags, so that
// every error can name its line: unknown and duplicate keys, type mismatches,
// bad durations, and ${VAR} references that the environment does not set.
// It returns every error found, joined.
func (c *Config) decodeYAML(file string, data []byte, getenv func(string) string) (err error) {
	c.origin = newOrigin(file)
	c.File = file
	if len(data) > maxFileBytes {
		return &Error{Where: file, Msg: fmt.Sprintf("config file is larger than %d bytes", maxFileBytes)}
	}
	var doc yaml.Node
	if err := yamlnode.ParseOne(data, &doc, "the config file holds exactly one"); err != nil {
		return &Error{Where: file, Msg: err.Error()}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil // an empty file is an empty config
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil
	}
	d := newYAMLDecoder(c.origin, getenv)
	d.Decode(root, reflect.ValueOf(c).Elem(), "", root.Line)
	return d.err()
}

// yamlDecoder is the shared strict walk (yamlnode.Decoder) with the
// configuration's rules: ${VAR} expanded in every value, list items
// starting from their defaults, and settings that read their own YAML
// (nodeDecoder).
type yamlDecoder struct {
	yamlnode.Decoder
	o      *origin
	getenv func(string) string
	errs   []error
}

func newYAMLDecoder(o *origin, getenv func(string) string) *yamlDecoder {
	d := &yamlDecoder{o: o, getenv: getenv}
	d.Decoder = yamlnode.Decoder{
		Scalars: configScalars,
		Budget:  maxNodes,
		Fail:    func(line int, path, msg string) { d.fail(line, path, "%s", msg) },
		TooLarge: func(line int, _ string) {
			d.errs = append(d.errs, &Error{Where: d.o.at(line), Msg: fmt.Sprintf("document too large (more than %d nodes after expanding aliases)", maxNodes), line: line, err: errTooLarge})
		},
		Seen: func(path string, line int) {
			if path != "" {
				d.o.lines[path] = line
			}
		},
		Expand: d.expand,
		Hook: func(n *yaml.Node, v reflect.Value, _ string, _ int) bool {
			h, ok := v.Addr().Interface().(nodeDecoder)
			if ok {
				d.errs = append(d.errs, h.decodeNode(n, d.o, d.getenv)...)
			}
			return ok
		},
		NewItem: func(v reflect.Value) {
			if def, ok := v.Addr().Interface().(interface{ setDefaults() }); ok {
				def.setDefaults()
			}
		},
	}
	return d
}

// configScalars are the file's value rules: yamlnode's defaults (no ints,
// a null duration or size is invalid, errors quote the whole value).
var configScalars = yamlnode.Scalars{}

func (d *yamlDecoder) err() error { return errors.Join(d.errs...) }

// sortErrors flattens joined errors and orders them: environment and flag
// problems first, then the file's from top to bottom; past maxErrors the
// rest are counted, not listed.
func sortErrors(errs ...error) error {
	var flat []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if err != nil {
			flat = append(flat, err)
		}
	}
	for _, e := range errs {
		walk(e)
	}
	lineOf := func(err error) int {
		var ce *Error
		if errors.As(err, &ce) {
			return ce.line
		}
		return 0
	}
	sort.SliceStable(flat, func(i, j int) bool { return lineOf(flat[i]) < lineOf(flat[j]) })
	if len(flat) > maxErrors {
		more := len(flat) - maxErrors
		flat = append(flat[:maxErrors], fmt.Errorf("and %d more problems", more))
	}
	return errors.Join(flat...)
}

func (d *yamlDecoder) fail(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Where: d.o.at(line), Path: path, Msg: fmt.Sprintf(format, args...), line: line})
	if path != "" {
		d.o.failed[path] = true
	}
}

// nodeDecoder is a setting that reads its own YAML (VendorList: package
// vendors owns the profiles' keys), reporting problems as config errors.
type nodeDecoder interface {
	decodeNode(n *yaml.Node, o *origin, getenv func(string) string) []error
}

// expand is the file's ${VAR} expansion; each unset variable is its own
// problem.
func (d *yamlDecoder) expand(s string) (string, error) {
	out, missing, err := expandEnv(s, d.getenv)
	if err != nil {
		return "", err
	}
	if len(missing) > 0 {
		errs := make([]error, len(missing))
		for i, name := range missing {
			errs[i] = fmt.Errorf("${%s} is not set in the environment", name)
		}
		return "", errors.Join(errs...)
	}
	return out, nil
}

// setScalar parses s into v by the file's rules: a Go duration, a
// TextUnmarshaler (ByteSize, slog.Level), a boolean or a string. Errors
// quote s: callers use it for non-secrets only.
func setScalar(v reflect.Value, s string) error {
	return yamlnode.SetScalar(v, s, configScalars)
}

// expandEnv replaces each ${NAME} in s with getenv(NAME); "$${" is a literal
// "${". A lone "$" is kept, so a secret containing "$" needs no escaping.
// An empty variable counts as unset: every place a ${VAR} is useful (tokens,
// secrets, keys) is wrong when empty. The names of unset variables are
// returned, never their values (there are none).
func expandEnv(s string, getenv func(string) string) (string, []string, error) {
	if !strings.Contains(s, "${") {
		return s, nil, nil
	}
	var b strings.Builder
	var missing []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' { // $${ → ${
			b.WriteString(s[:i])
			b.WriteString("{")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", nil, errors.New("unterminated ${ (write $${ for a literal ${)")
		}
		name := s[i+2 : i+end]
		if !validEnvName(name) {
			return "", nil, fmt.Errorf("bad variable name %q in ${...}: want [A-Za-z_][A-Za-z0-9_]*", yamlnode.Truncate(name, 40))
		}
		val := ""
		if getenv != nil {
			val = getenv(name)
		}
		if val == "" {
			missing = append(missing, name)
		}
		b.WriteString(val)
		s = s[i+end+1:]
	}
	return b.String(), missing, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// fieldByPath finds the field of a top-level setting ("resolver.interval").
func fieldByPath(v reflect.Value, path string) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		f, ok := yamlnode.FieldByName(v.Type(), name)
		if !ok {
			return reflect.Value{}, false
		}
		v = v.FieldByIndex(f.Index)
	}
	return v, true
}
