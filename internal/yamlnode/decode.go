package yamlnode

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decoder walks a YAML node tree into a value of tagged structs strictly:
// unknown and duplicate keys, wrong kinds and bad values are reported,
// each with the line and the path (spelled as in the file:
// stripe.endpoints[0].secrets) where it was written. It reads structs (by
// yaml tag), pointers to structs, lists, maps with string keys and the
// scalars of Scalars. A field tagged secret:"true" never has its value
// quoted: a value it cannot read is an "invalid value".
//
// Each caller keeps its own error type (Fail builds it) and its own
// extras (Expand, Hook, NewItem). A Decoder is used by one goroutine.
type Decoder struct {
	// Scalars are the rules for single values.
	Scalars Scalars
	// Budget is how many nodes the walk may still visit: aliases can make
	// a small document expand to millions. It is left as the walk ends, so
	// several walks can share one budget.
	Budget int
	// Fail reports a problem at line (where its key was written) with the
	// setting path ("" for the root). Required.
	Fail func(line int, path, msg string)
	// TooLarge reports, once, that Budget ran out; nil: Fail is called
	// with "document too large".
	TooLarge func(line int, path string)
	// Seen, if set, is called with every path the walk decodes a value
	// into (the root's is "") and the line where it was written.
	Seen func(path string, line int)
	// Expand, if set, rewrites a scalar's text before it is read (the
	// configuration's ${VAR}); a null is not expanded. Its errors must not
	// quote a secret; each part of a joined error (errors.Join) is
	// reported on its own.
	Expand func(s string) (string, error)
	// Hook, if set, is offered every value before the walk decodes it
	// (after Seen); returning true means it decoded v itself, reporting
	// its own problems.
	Hook func(n *yaml.Node, v reflect.Value, path string, line int) bool
	// NewItem, if set, is called on each new list item before it is
	// decoded (to fill in defaults the item's keys then override).
	NewItem func(v reflect.Value)
}

// Decode stores n into v (addressable); path names v ("" for the root)
// and line is where v was written (its key's line for a mapping entry).
func (d *Decoder) Decode(n *yaml.Node, v reflect.Value, path string, line int) {
	d.decode(n, v, path, line, false)
}

func (d *Decoder) fail(line int, path, format string, args ...any) {
	d.Fail(line, path, fmt.Sprintf(format, args...))
}

func (d *Decoder) decode(n *yaml.Node, v reflect.Value, path string, line int, secret bool) {
	d.Budget--
	if d.Budget < 0 {
		if d.Budget == -1 {
			if d.TooLarge != nil {
				d.TooLarge(line, path)
			} else {
				d.fail(line, path, "document too large")
			}
		}
		return
	}
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(line, path, "alias to an unknown anchor")
			return
		}
		n = n.Alias
	}
	if d.Seen != nil {
		d.Seen(path, line)
	}
	if d.Hook != nil && d.Hook(n, v, path, line) {
		return
	}
	null := n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
	t := v.Type()
	switch {
	case d.Scalars.isScalar(t):
		s, ok := d.scalar(n, path, line)
		if !ok {
			return
		}
		if err := SetScalar(v, s, d.Scalars); err != nil {
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
			f, ok := FieldByName(t, key.Value)
			if !ok {
				d.fail(key.Line, JoinPath(path, key.Value), "unknown key (known: %s)", strings.Join(FieldNames(t), ", "))
				return
			}
			d.decode(val, v.FieldByIndex(f.Index), JoinPath(path, key.Value), key.Line, f.Tag.Get("secret") == "true")
		})
	case t.Kind() == reflect.Slice:
		if null {
			v.SetZero()
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(line, path, "want a list, got %s", Kind(n))
			return
		}
		out := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			elem := out.Index(i)
			if d.NewItem != nil {
				d.NewItem(elem)
			}
			d.decode(item, elem, path+"["+strconv.Itoa(i)+"]", item.Line, false)
		}
		v.Set(out)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		if null {
			v.SetZero()
			return
		}
		out := reflect.MakeMap(t)
		d.mapping(n, path, line, func(key, val *yaml.Node) {
			elem := reflect.New(t.Elem()).Elem()
			d.decode(val, elem, MapPath(path, key.Value), key.Line, false)
			out.SetMapIndex(reflect.ValueOf(key.Value).Convert(t.Key()), elem)
		})
		v.Set(out)
	default:
		// The callers' types hold only the kinds above; a new kind must be
		// taught here.
		d.fail(line, path, "internal error: cannot decode into %s", t)
	}
}

// mapping walks a mapping node's entries, refusing duplicate keys,
// non-string keys and merge keys (<<), which would hide where a value came
// from.
func (d *Decoder) mapping(n *yaml.Node, path string, line int, each func(key, val *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.fail(line, path, "want a mapping, got %s", Kind(n))
		return
	}
	Mapping(n, each, func(key *yaml.Node, duplicate bool, msg string) {
		if duplicate {
			d.Fail(key.Line, MapPath(path, key.Value), msg)
			return
		}
		d.Fail(key.Line, path, msg)
	})
}

// scalar returns the (expanded) text of a scalar node; "" for a null.
func (d *Decoder) scalar(n *yaml.Node, path string, line int) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(line, path, "want a single value, got %s", Kind(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		return "", true
	}
	if d.Expand == nil {
		return n.Value, true
	}
	s, err := d.Expand(n.Value)
	if err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				d.Fail(line, path, e.Error())
			}
		} else {
			d.Fail(line, path, err.Error())
		}
		return "", false
	}
	return s, true
}
