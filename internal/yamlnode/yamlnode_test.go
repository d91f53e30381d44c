package yamlnode

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParseOne(t *testing.T) {
	for _, tt := range []struct {
		name, in, wantErr string
		empty             bool
	}{
		{name: "one document", in: "a: 1\n"},
		{name: "empty file", in: "", empty: true},
		{name: "two documents", in: "a: 1\n---\nb: 2\n", wantErr: "line 2: a second YAML document: the file holds one"},
		{name: "syntax error", in: "a: [1\n", wantErr: "yaml:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var doc yaml.Node
			err := ParseOne([]byte(tt.in), &doc, "the file holds one")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			case tt.wantErr == "" && tt.empty != (len(doc.Content) == 0):
				t.Fatalf("document empty = %v, want %v", len(doc.Content) == 0, tt.empty)
			}
		})
	}
}

func TestMapping(t *testing.T) {
	var doc yaml.Node
	in := "a: 1\nb: 2\na: 3\n? [x]\n: 4\n<<: {c: 5}\nd: 6\n"
	if err := ParseOne([]byte(in), &doc, ""); err != nil {
		t.Fatal(err)
	}
	var got, problems []string
	Mapping(doc.Content[0], func(key, val *yaml.Node) {
		got = append(got, key.Value+"="+val.Value)
	}, func(key *yaml.Node, duplicate bool, msg string) {
		if duplicate != strings.HasPrefix(msg, "duplicate") {
			t.Errorf("duplicate = %v for %q", duplicate, msg)
		}
		problems = append(problems, msg)
	})
	if strings.Join(got, " ") != "a=1 b=2 d=6" {
		t.Errorf("entries = %v, want a=1 b=2 d=6", got)
	}
	want := []string{"duplicate key (first at line 1)", "a key must be a plain string, got a list", "merge keys (<<) are not supported: write the values out"}
	if strings.Join(problems, "|") != strings.Join(want, "|") {
		t.Errorf("problems = %q, want %q", problems, want)
	}
}

func TestFields(t *testing.T) {
	type s struct {
		Name    string `yaml:"name"`
		Options int    `yaml:"options,omitempty"`
		Skip    bool   `yaml:"-"`
		NoTag   string
		hidden  string `yaml:"hidden"` // an unexported field is never set from a file
	}
	typ := reflect.TypeFor[s]()
	if got := FieldNames(typ); !slices.Equal(got, []string{"name", "options"}) {
		t.Errorf("FieldNames = %v, want [name options]", got)
	}
	for _, tc := range []struct {
		key  string
		want string // field name, "" for none
	}{
		{"name", "Name"}, {"options", "Options"}, {"-", ""}, {"Skip", ""}, {"", ""}, {"hidden", ""}, {"NoTag", ""},
	} {
		f, ok := FieldByName(typ, tc.key)
		if got := map[bool]string{true: f.Name}[ok]; got != tc.want {
			t.Errorf("FieldByName(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	_ = s{}.hidden
}
