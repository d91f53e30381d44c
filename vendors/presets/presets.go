// Package presets ships the vendor presets: one YAML file per vendor, in
// the `vendors:` entry's own keys (docs/vendors.md). vendors.Load starts an
// entry that names `preset: X` from X.yaml. Each preset has a test here
// against a fake that behaves like the vendor.
package presets

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Names lists the presets, sorted.
func Names() []string {
	ents, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// File returns the preset's file name and contents; ok is false for a
// preset that does not exist.
func File(name string) (file string, data []byte, ok bool) {
	if name == "" || strings.ContainsAny(name, "/\\.") {
		return "", nil, false
	}
	file = name + ".yaml"
	data, err := files.ReadFile(file)
	if err != nil {
		return "", nil, false
	}
	return "presets/" + file, data, true
}
