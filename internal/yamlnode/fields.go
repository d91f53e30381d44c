package yamlnode

import (
	"reflect"
	"sort"
	"strings"
)

// FieldName is the key a struct field is written under: its yaml tag's
// name; "" for a field with none, tagged "-", or unexported (never set
// from a file).
func FieldName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// FieldByName finds the field of struct type t written under key name.
func FieldByName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if n := FieldName(f); n != "" && n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// FieldNames lists the keys of struct type t, sorted: what an "unknown
// key" error offers instead.
func FieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := FieldName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
