package yamlnode

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// level is a TextUnmarshaler that records the text it was handed.
type level string

func (l *level) UnmarshalText(b []byte) error {
	if string(b) != "low" && string(b) != "high" {
		return fmt.Errorf("unknown level %q", b)
	}
	*l = level(b)
	return nil
}

type key string

type inner struct {
	Port int    `yaml:"port"`
	Host string `yaml:"host"`
}

type item struct {
	Name  string `yaml:"name"`
	Retry bool   `yaml:"retry"`
}

type doc struct {
	Name     string           `yaml:"name"`
	Wait     time.Duration    `yaml:"wait"`
	On       bool             `yaml:"on"`
	Count    int              `yaml:"count"`
	Level    level            `yaml:"level"`
	Password string           `yaml:"password" secret:"true"`
	PIN      bool             `yaml:"pin" secret:"true"`
	Inner    inner            `yaml:"inner"`
	Ptr      *inner           `yaml:"ptr"`
	Items    []item           `yaml:"items"`
	Tags     map[key]string   `yaml:"tags"`
	Waits    map[string]int   `yaml:"waits"`
	Custom   []string         `yaml:"custom"`
	Floats   float64          `yaml:"floats"`
	Skipped  string           `yaml:"-"`
	Nested   map[string]inner `yaml:"nested"`
	Unexport string
}

// run is what one walk reported: its problems ("line path: msg") and the
// positions it saw.
type run struct {
	problems []string
	seen     map[string]int
}

func decodeDoc(t *testing.T, in string, setup func(*Decoder, *run)) (doc, *run) {
	t.Helper()
	var n yaml.Node
	if err := ParseOne([]byte(in), &n, "one"); err != nil {
		t.Fatal(err)
	}
	r := &run{seen: map[string]int{}}
	d := &Decoder{
		Budget: 1000,
		Fail: func(line int, path, msg string) {
			r.problems = append(r.problems, fmt.Sprintf("%d %s: %s", line, path, msg))
		},
		Seen: func(path string, line int) { r.seen[path] = line },
	}
	if setup != nil {
		setup(d, r)
	}
	var v doc
	if len(n.Content) > 0 {
		d.Decode(n.Content[0], reflect.ValueOf(&v).Elem(), "", n.Content[0].Line)
	}
	return v, r
}

func TestDecode(t *testing.T) {
	vendorish := func(d *Decoder, _ *run) {
		d.Scalars = Scalars{Ints: true, NoNegativeDurations: true, BlankIsZero: true, RawText: true, QuoteLimit: 8}
	}
	for _, tc := range []struct {
		name  string
		in    string
		setup func(*Decoder, *run)
		want  []string              // problems, in order
		check func(*testing.T, doc) // the decoded value, when there is more to see
	}{
		{name: "values", in: "name: a\nwait: 90s\non: true\nlevel: high\ninner: {port: 80, host: h}\n", setup: vendorish},
		{name: "trimmed text by default", in: "level: \" high \"\n",
			check: func(t *testing.T, v doc) {
				if v.Level != "high" {
					t.Errorf("level = %q, want high", v.Level)
				}
			}},
		{name: "raw text", in: "level: \" high \"\n", setup: vendorish,
			want: []string{`1 level: unknown level " high "`}},
		{name: "unknown key names the known ones", in: "name: a\nnope: 1\n",
			want: []string{"2 nope: unknown key (known: count, custom, floats, inner, items, level, name, nested, on, password, pin, ptr, tags, wait, waits)"}},
		{name: "unknown nested key on its own line", in: "inner:\n  host: a\n\n  hots: x\n",
			want: []string{"4 inner.hots: unknown key (known: host, port)"}},
		{name: "duplicate key names the first line", in: "name: a\nname: b\n",
			want: []string{"2 name: duplicate key (first at line 1)"}},
		{name: "merge key", in: "inner:\n  <<: {port: 1}\n",
			want: []string{"2 inner: merge keys (<<) are not supported: write the values out"}},
		{name: "wrong kinds", in: "name: [a]\ninner: 3\nitems: {a: 1}\n",
			want: []string{"1 name: want a single value, got a list", "2 inner: want a mapping, got a single value", "3 items: want a list, got a mapping"}},
		{name: "root not a mapping", in: "- a\n",
			want: []string{"1 : want a mapping, got a list"}},
		{name: "list items name their index and line", in: "items:\n  - name: a\n  - name: b\n    retry: maybe\n",
			want: []string{`4 items[1].retry: invalid boolean "maybe": want true or false`}},
		{name: "map entries quote odd keys", in: "nested:\n  a.b:\n    port: x\n", setup: vendorish,
			want: []string{`3 nested["a.b"].port: invalid number "x": want a whole number`}},
		{name: "ints off: an int field is an internal error", in: "count: 3\n",
			want: []string{"1 count: internal error: cannot decode into int"}},
		{name: "ints on", in: "count: 3\nwaits: {a: 2}\n", setup: vendorish,
			check: func(t *testing.T, v doc) {
				if v.Count != 3 || v.Waits["a"] != 2 {
					t.Errorf("count = %d, waits = %v", v.Count, v.Waits)
				}
			}},
		{name: "unsupported kind", in: "floats: 1.5\n",
			want: []string{"1 floats: internal error: cannot decode into float64"}},
		{name: "negative duration allowed by default", in: "wait: -5s\n",
			check: func(t *testing.T, v doc) {
				if v.Wait != -5*time.Second {
					t.Errorf("wait = %v", v.Wait)
				}
			}},
		{name: "negative duration refused", in: "wait: -5s\n", setup: vendorish,
			want: []string{`1 wait: invalid duration "-5s": want a Go duration such as 90s or 15m`}},
		{name: "null duration invalid by default", in: "wait:\nlevel:\n",
			want: []string{`1 wait: invalid duration "": want a Go duration such as 90s or 15m`, `2 level: unknown level ""`}},
		{name: "null is zero", in: "wait: ~\nlevel: \"  \"\n", setup: vendorish},
		{name: "quote limit", in: "on: abcdefghijkl\n", setup: vendorish,
			want: []string{`1 on: invalid boolean "abcdefgh…": want true or false`}},
		{name: "whole quote by default", in: "on: abcdefghijkl\n",
			want: []string{`1 on: invalid boolean "abcdefghijkl": want true or false`}},
		{name: "secret values are never quoted", in: "pin: hunter2\n",
			want: []string{"1 pin: invalid value"}},
		{name: "expand", in: "name: ${A}\npassword: ${B}\n",
			setup: func(d *Decoder, _ *run) {
				d.Expand = func(s string) (string, error) {
					if s == "${B}" {
						return "", errors.Join(errors.New("B is not set"), errors.New("C is not set"))
					}
					return "x" + s, nil
				}
			},
			want: []string{"2 password: B is not set", "2 password: C is not set"},
			check: func(t *testing.T, v doc) {
				if v.Name != "x${A}" {
					t.Errorf("name = %q", v.Name)
				}
			}},
		{name: "a null is not expanded", in: "name: ~\n",
			setup: func(d *Decoder, _ *run) {
				d.Expand = func(string) (string, error) { return "", errors.New("called") }
			}},
		{name: "hook decodes its own value", in: "custom: {any: thing}\nname: a\n",
			setup: func(d *Decoder, r *run) {
				d.Hook = func(n *yaml.Node, v reflect.Value, path string, line int) bool {
					if v.Type() != reflect.TypeFor[[]string]() {
						return false
					}
					v.Set(reflect.ValueOf([]string{Kind(n), path}))
					r.problems = append(r.problems, fmt.Sprintf("hook at %d", line))
					return true
				}
			},
			want: []string{"hook at 1"},
			check: func(t *testing.T, v doc) {
				if strings.Join(v.Custom, "|") != "a mapping|custom" || v.Name != "a" {
					t.Errorf("custom = %q, name = %q", v.Custom, v.Name)
				}
			}},
		{name: "new items start from defaults", in: "items:\n  - name: a\n  - retry: false\n",
			setup: func(d *Decoder, _ *run) {
				d.NewItem = func(v reflect.Value) { v.Set(reflect.ValueOf(item{Name: "default", Retry: true})) }
			},
			check: func(t *testing.T, v doc) {
				want := []item{{Name: "a", Retry: true}, {Name: "default", Retry: false}}
				if !reflect.DeepEqual(v.Items, want) {
					t.Errorf("items = %+v, want %+v", v.Items, want)
				}
			}},
		{name: "pointer to struct", in: "ptr: {port: 8}\n", setup: vendorish,
			check: func(t *testing.T, v doc) {
				if v.Ptr == nil || v.Ptr.Port != 8 {
					t.Errorf("ptr = %+v", v.Ptr)
				}
			}},
		{name: "named map keys", in: "tags: {a: b}\n",
			check: func(t *testing.T, v doc) {
				if v.Tags[key("a")] != "b" {
					t.Errorf("tags = %v", v.Tags)
				}
			}},
		{name: "aliases", in: "inner: &i {host: h}\nptr: *i\n", setup: vendorish,
			check: func(t *testing.T, v doc) {
				if v.Ptr == nil || v.Ptr.Host != "h" {
					t.Errorf("ptr = %+v", v.Ptr)
				}
			}},
		{name: "budget: reported once at the node that ran out", in: "items: [{name: a}, {name: b}, {name: c}]\n",
			setup: func(d *Decoder, _ *run) { d.Budget = 4 },
			want:  []string{"1 items[1]: document too large"}},
		{name: "budget: TooLarge replaces the message", in: "items: [{name: a}, {name: b}]\n",
			setup: func(d *Decoder, r *run) {
				d.Budget = 2
				d.TooLarge = func(line int, path string) {
					r.problems = append(r.problems, fmt.Sprintf("too large at %d %s", line, path))
				}
			},
			want: []string{"too large at 1 items[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := decodeDoc(t, tc.in, tc.setup)
			if strings.Join(r.problems, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(r.problems, "\n"), strings.Join(tc.want, "\n"))
			}
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

// TestDecodeSeen checks the positions a walk records: every path it
// decodes into, at the line of its key (a list item's at its own line).
func TestDecodeSeen(t *testing.T) {
	_, r := decodeDoc(t, "name: a\n\ninner:\n  host: h\nitems:\n  - name: x\n  -\n    name: y\n", nil)
	want := map[string]int{"": 1, "name": 1, "inner": 3, "inner.host": 4, "items": 5, "items[0]": 6, "items[0].name": 6, "items[1]": 8, "items[1].name": 8}
	if len(r.problems) > 0 {
		t.Fatalf("problems: %q", r.problems)
	}
	if !reflect.DeepEqual(r.seen, want) {
		t.Errorf("seen = %v, want %v", r.seen, want)
	}
}

// TestDecodeUnknownAnchor: yaml.v3 refuses an unknown anchor when parsing,
// but a node built in code can hold an alias to nothing.
func TestDecodeUnknownAnchor(t *testing.T) {
	var got []string
	d := &Decoder{Budget: 10, Fail: func(line int, path, msg string) { got = append(got, fmt.Sprintf("%d %s: %s", line, path, msg)) }}
	var v doc
	d.Decode(&yaml.Node{Kind: yaml.AliasNode, Line: 7}, reflect.ValueOf(&v).Elem(), "root", 7)
	if want := "7 root: alias to an unknown anchor"; strings.Join(got, "|") != want {
		t.Errorf("problems = %q, want %q", got, want)
	}
}

func TestSetScalar(t *testing.T) {
	vendor := Scalars{Ints: true, NoNegativeDurations: true, BlankIsZero: true, RawText: true, QuoteLimit: 40}
	for _, tc := range []struct {
		name    string
		into    any // a pointer to the value to set
		in      string
		r       Scalars
		want    any
		wantErr string
	}{
		{"duration", new(time.Duration), " 90s ", Scalars{}, 90 * time.Second, ""},
		{"duration quoted as written", new(time.Duration), " soon ", Scalars{}, nil, `invalid duration " soon "`},
		{"duration quoted trimmed", new(time.Duration), " soon ", vendor, nil, `invalid duration "soon"`},
		{"blank duration", new(time.Duration), " ", vendor, time.Duration(0), ""},
		{"string kept as written", new(string), " a ", Scalars{}, " a ", ""},
		{"bool", new(bool), " true ", Scalars{}, true, ""},
		{"int", new(int), "-3", vendor, -3, ""},
		{"int without Ints", new(int), "3", Scalars{}, nil, "internal error: cannot set int"},
		{"text trimmed", new(level), " low ", Scalars{}, level("low"), ""},
		{"text raw", new(level), " low ", vendor, nil, `unknown level " low "`},
		{"blank text is zero", new(level), "", vendor, level(""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := reflect.ValueOf(tc.into).Elem()
			err := SetScalar(v, tc.in, tc.r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := v.Interface(); got != tc.want {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}
