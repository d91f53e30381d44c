package vendors

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/reconciler/internal/yamlnode"
	"github.com/agentledger/reconciler/vendors/presets"
)

// Options configure Load.
type Options struct {
	// File names the configuration file in positions ("" for none).
	File string
	// Path is the list's key, the prefix of every error's path (default
	// "vendors").
	Path string
	// Expand expands a scalar as written (the configuration's ${VAR}); its
	// error must not quote a secret. Nil: values are taken as written.
	Expand func(string) (string, error)
}

// maxNodes bounds the work one hostile document can cause (aliases expand).
const maxNodes = 100_000

// Load decodes the `vendors:` list node, merges each entry with its preset
// and validates the result. It returns every problem found, joined, each an
// *Error naming its file, line and key, top to bottom.
func Load(list *yaml.Node, o Options) ([]Profile, error) {
	if o.Path == "" {
		o.Path = "vendors"
	}
	if list == nil || list.Kind == 0 || (list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null") {
		return nil, nil
	}
	d := newDecoder(o.File, o.Expand, maxNodes)
	if list.Kind != yaml.SequenceNode {
		d.fail(list.Line, o.Path, "want a list of vendors, got %s", yamlnode.Kind(list))
		return nil, joinErrors(d.errs)
	}
	var out []Profile
	var errs []*Error
	seen := map[string]int{}
	for i, item := range list.Content {
		path := o.Path + "[" + strconv.Itoa(i) + "]"
		p, es := loadOne(item, path, o, &d.Budget)
		errs = append(errs, es...)
		if len(es) > 0 {
			continue
		}
		if first, dup := seen[p.Name]; dup {
			errs = append(errs, &Error{Pos: Pos{File: o.File, Line: item.Line}, Path: path + ".name",
				Msg: fmt.Sprintf("vendor %q is named twice (first at %s[%d])", p.Name, o.Path, first)})
			continue
		}
		seen[p.Name] = i
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return out, nil
}

// loadOne decodes one entry, merges its preset and validates it.
func loadOne(item *yaml.Node, path string, o Options, budget *int) (Profile, []*Error) {
	user := newDecoder(o.File, o.Expand, *budget)
	var u Profile
	user.Decode(item, reflect.ValueOf(&u).Elem(), "", item.Line)
	*budget = user.Budget
	if len(user.errs) > 0 {
		return Profile{}, prefix(user.errs, path)
	}
	merged, pos := u, user.pos
	if u.Preset != "" {
		file, data, ok := presets.File(u.Preset)
		if !ok {
			return Profile{}, []*Error{{Pos: user.pos["preset"], Path: path + ".preset",
				Msg: fmt.Sprintf("no preset %q (shipped: %v)", yamlnode.Truncate(u.Preset, 40), presets.Names())}}
		}
		base, basePos, errs := decodePreset(file, data)
		if len(errs) > 0 {
			return Profile{}, prefix(errs, path)
		}
		merged = base
		mergeValue(reflect.ValueOf(&merged).Elem(), reflect.ValueOf(u), "", user.pos)
		pos = basePos
		for k, v := range user.pos {
			pos[k] = v
		}
	}
	errs := validate(merged, u, func(p string) Pos { return nearest(pos, p, Pos{File: o.File, Line: item.Line}) })
	if len(errs) > 0 {
		return Profile{}, prefix(errs, path)
	}
	merged.fillDefaults()
	return merged, nil
}

// decodePreset reads a shipped preset (the same keys as an entry, no
// environment expansion: presets hold no secrets).
func decodePreset(file string, data []byte) (Profile, map[string]Pos, []*Error) {
	var doc yaml.Node
	if err := yamlnode.ParseOne(data, &doc, "a preset holds one"); err != nil {
		return Profile{}, nil, []*Error{{Pos: Pos{File: file}, Msg: err.Error()}}
	}
	if len(doc.Content) == 0 {
		return Profile{}, nil, []*Error{{Pos: Pos{File: file}, Msg: "empty preset"}}
	}
	d := newDecoder(file, nil, maxNodes)
	var p Profile
	d.Decode(doc.Content[0], reflect.ValueOf(&p).Elem(), "", doc.Content[0].Line)
	return p, d.pos, d.errs
}

// mergeValue overlays src onto dst for every key the entry set (set holds
// their paths): structs and maps key by key, anything else replaced. A
// block the entry set to null removes the preset's.
func mergeValue(dst, src reflect.Value, path string, set map[string]Pos) {
	t := dst.Type()
	switch {
	case t == reflect.TypeFor[Idempotency]():
		// One placement: the entry's block replaces the preset's whole.
		dst.Set(src)
	case t.Kind() == reflect.Struct && t != reflect.TypeFor[Rate]():
		for i := range t.NumField() {
			name := yamlnode.FieldName(t.Field(i))
			fp := yamlnode.JoinPath(path, name)
			if !setUnder(set, fp) {
				continue
			}
			mergeValue(dst.Field(i), src.Field(i), fp, set)
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if src.IsNil() || dst.IsNil() {
			dst.Set(src)
			return
		}
		cp := reflect.New(t.Elem())
		cp.Elem().Set(dst.Elem())
		mergeValue(cp.Elem(), src.Elem(), path, set)
		dst.Set(cp)
	case t.Kind() == reflect.Map:
		if src.IsNil() || dst.IsNil() {
			dst.Set(src)
			return
		}
		out := reflect.MakeMap(t)
		for _, k := range dst.MapKeys() {
			out.SetMapIndex(k, dst.MapIndex(k))
		}
		for _, k := range src.MapKeys() {
			out.SetMapIndex(k, src.MapIndex(k))
		}
		dst.Set(out)
	default:
		dst.Set(src)
	}
}

// setUnder reports whether the entry wrote path itself.
func setUnder(set map[string]Pos, path string) bool {
	_, ok := set[path]
	return ok
}

// nearest is the position of path or of its nearest ancestor.
func nearest(pos map[string]Pos, path string, def Pos) Pos {
	for p := path; p != ""; p = parent(p) {
		if v, ok := pos[p]; ok {
			return v
		}
	}
	return def
}

func parent(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		switch p[i] {
		case '.':
			return p[:i]
		case '[':
			return p[:i]
		}
	}
	return ""
}

func prefix(errs []*Error, path string) []*Error {
	for _, e := range errs {
		e.Path = joinIndex(path, e.Path)
	}
	return errs
}

func joinIndex(path, p string) string {
	if p == "" {
		return path
	}
	if p[0] == '[' {
		return path + p
	}
	return path + "." + p
}

func joinErrors(errs []*Error) error {
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].Pos.File != errs[j].Pos.File {
			return errs[i].Pos.File < errs[j].Pos.File
		}
		return errs[i].Pos.Line < errs[j].Pos.Line
	})
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// Parse reads the profiles of a YAML document whose top level holds a
// `vendors:` list (the shape of the configuration file; other keys are
// ignored), with o as Load's (o.File is set to file).
func Parse(file string, data []byte, o Options) ([]Profile, error) {
	var doc yaml.Node
	if err := yamlnode.ParseOne(data, &doc, "the file holds one"); err != nil {
		return nil, &Error{Pos: Pos{File: file}, Msg: err.Error()}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "vendors" {
			o.File = file
			return Load(root.Content[i+1], o)
		}
	}
	return nil, nil
}
