package vendors

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/internal/yamlnode"
)

// Pos is where a value was written: a file (the configuration's, or a
// preset's "presets/resend.yaml") and a line.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.File == "" {
		return "line " + strconv.Itoa(p.Line)
	}
	return p.File + ":" + strconv.Itoa(p.Line)
}

// Error is one problem with a profile: where, the key (as written in the
// file: vendors[0].lookup.url) and what is wrong. It never quotes a
// secret's value.
type Error struct {
	Pos  Pos
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.Line > 0 || e.Pos.File != "" {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// decoder reads YAML nodes into Profile strictly: unknown and duplicate
// keys, wrong kinds and bad values are errors naming their line; it records
// the position of every key it sets, so a merge knows what an entry set
// and validation can point at it.
type decoder struct {
	file   string
	expand func(string) (string, error)
	pos    map[string]Pos
	errs   []*Error
	budget int
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (d *decoder) fail(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: Pos{File: d.file, Line: line}, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// decode stores n into v; path names v, line is where its key was written.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string, line int, secret bool) {
	d.budget--
	if d.budget < 0 {
		if d.budget == -1 {
			d.fail(line, path, "profile too large")
		}
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	d.pos[path] = Pos{File: d.file, Line: line}
	null := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) ||
		t.Kind() == reflect.String || t.Kind() == reflect.Bool || t.Kind() == reflect.Int:
		if n.Kind != yaml.ScalarNode {
			d.fail(line, path, "want a single value, got %s", yamlnode.Kind(n))
			return
		}
		s := n.Value
		if null {
			s = ""
		}
		if d.expand != nil {
			var err error
			if s, err = d.expand(s); err != nil {
				d.fail(line, path, "%v", err)
				return
			}
		}
		if err := setScalar(v, s); err != nil {
			if secret {
				d.fail(line, path, "invalid value")
			} else {
				d.fail(line, path, "%v", err)
			}
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if null {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(n, v.Elem(), path, line, false)
	case t.Kind() == reflect.Struct:
		if null {
			return
		}
		d.mapping(n, path, line, func(key, val *yaml.Node) {
			f, ok := yamlnode.FieldByName(t, key.Value)
			if !ok {
				d.fail(key.Line, yamlnode.JoinPath(path, key.Value), "unknown key (known: %s)", strings.Join(yamlnode.FieldNames(t), ", "))
				return
			}
			d.decode(val, v.FieldByIndex(f.Index), yamlnode.JoinPath(path, key.Value), key.Line, f.Tag.Get("secret") == "true")
		})
	case t.Kind() == reflect.Slice:
		if null {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(line, path, "want a list, got %s", yamlnode.Kind(n))
			return
		}
		out := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, out.Index(i), path+"["+strconv.Itoa(i)+"]", item.Line, false)
		}
		v.Set(out)
	case t.Kind() == reflect.Map:
		if null {
			v.SetZero()
			return
		}
		out := reflect.MakeMap(t)
		d.mapping(n, path, line, func(key, val *yaml.Node) {
			elem := reflect.New(t.Elem()).Elem()
			d.decode(val, elem, yamlnode.MapPath(path, key.Value), key.Line, false)
			out.SetMapIndex(reflect.ValueOf(key.Value), elem)
		})
		v.Set(out)
	default:
		d.fail(line, path, "internal error: cannot decode into %s", t)
	}
}

// mapping walks a mapping node's entries, refusing duplicate keys,
// non-string keys and merge keys (<<), which would hide where a value came
// from.
func (d *decoder) mapping(n *yaml.Node, path string, line int, each func(key, val *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.fail(line, path, "want a mapping, got %s", yamlnode.Kind(n))
		return
	}
	yamlnode.Mapping(n, each, func(key *yaml.Node, duplicate bool, msg string) {
		if duplicate {
			d.fail(key.Line, yamlnode.MapPath(path, key.Value), "%s", msg)
			return
		}
		d.fail(key.Line, path, "%s", msg)
	})
}

func setScalar(v reflect.Value, s string) error {
	t := v.Type()
	switch {
	case t == durationType:
		s = strings.TrimSpace(s)
		if s == "" || s == "0" {
			v.SetInt(0)
			return nil
		}
		dur, err := time.ParseDuration(s)
		if err != nil || dur < 0 {
			return fmt.Errorf("invalid duration %q: want a Go duration such as 90s or 15m", yamlnode.Truncate(s, 40))
		}
		v.SetInt(int64(dur))
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		if strings.TrimSpace(s) == "" {
			v.SetZero()
			return nil
		}
		return v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s))
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("invalid boolean %q: want true or false", yamlnode.Truncate(s, 40))
		}
		v.SetBool(b)
	case t.Kind() == reflect.Int:
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("invalid number %q: want a whole number", yamlnode.Truncate(s, 40))
		}
		v.SetInt(int64(i))
	}
	return nil
}
