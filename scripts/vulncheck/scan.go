package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// scan is what one govulncheck run found.
type scan struct {
	Scanner, GoVersion, DB string
	// Called are the vulnerabilities our code calls, by OSV id.
	Called map[string]*vuln
	// Uncalled are found only in required modules or imported packages.
	Uncalled map[string]*vuln
}

type vuln struct {
	ID, Summary string
	Module      string // module@version
	Fixed       string // "" when no version fixes it
	Trace       string // one call path, our code → the vulnerable symbol
}

// The part of govulncheck's JSON protocol (v1.0.0, golang.org/x/vuln's
// internal/govulncheck) this program reads.
type message struct {
	Config *struct {
		ScannerName    string `json:"scanner_name"`
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
		GoVersion      string `json:"go_version"`
		ScanLevel      string `json:"scan_level"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

// frame is one step of a finding's trace: the first is the vulnerable
// symbol (or only its module or package, for a finding that calls
// nothing), the last the entry point in our code.
type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
	Position *struct {
		Filename string `json:"filename"`
		Line     int    `json:"line"`
	} `json:"position"`
}

// readScan decodes the stream. A stream without its config message, or from
// a scan below symbol level, cannot tell called from merely required, so it
// is an error rather than a pass.
func readScan(r io.Reader) (scan, error) {
	s := scan{Called: map[string]*vuln{}, Uncalled: map[string]*vuln{}}
	summaries := map[string]string{}
	sawConfig := false
	dec := json.NewDecoder(r)
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return scan{}, fmt.Errorf("govulncheck output: %w", err)
		}
		switch {
		case m.Config != nil:
			if m.Config.ScanLevel != "symbol" {
				return scan{}, fmt.Errorf("govulncheck scanned at %q level: want symbol", m.Config.ScanLevel)
			}
			sawConfig = true
			s.Scanner = m.Config.ScannerName + " " + m.Config.ScannerVersion
			s.GoVersion, s.DB = m.Config.GoVersion, m.Config.DB
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil && len(m.Finding.Trace) > 0:
			f := m.Finding
			v := &vuln{ID: f.OSV, Fixed: f.FixedVersion, Module: f.Trace[0].Module + "@" + f.Trace[0].Version}
			into := s.Uncalled
			if f.Trace[0].Function != "" {
				into, v.Trace = s.Called, traceText(f.Trace)
			}
			// Findings repeat per level and per trace: keep one, the
			// smallest trace, so that the report reads the same each run.
			if old, ok := into[v.ID]; !ok || v.Trace < old.Trace {
				into[v.ID] = v
			}
		}
	}
	if !sawConfig {
		return scan{}, errors.New("govulncheck output has no config message: did it run?")
	}
	for id, v := range s.Called {
		v.Summary = summaries[id]
		delete(s.Uncalled, id)
	}
	for id, v := range s.Uncalled {
		v.Summary = summaries[id]
	}
	return s, nil
}

// traceText is "entry (file:line) → … → symbol".
func traceText(tr []frame) string {
	parts := make([]string, 0, len(tr))
	for i := len(tr) - 1; i >= 0; i-- {
		f := tr[i]
		name := pkgName(f.Package) + "."
		if f.Receiver != "" {
			name += strings.TrimPrefix(f.Receiver, "*") + "."
		}
		name += f.Function
		if f.Position != nil && f.Position.Filename != "" && f.Module == tr[len(tr)-1].Module {
			name += fmt.Sprintf(" (%s:%d)", f.Position.Filename, f.Position.Line)
		}
		parts = append(parts, name)
	}
	return strings.Join(parts, " → ")
}

// pkgName is the name a package path is usually imported as: its last
// element, or the one before a major version (echo/v4 is echo).
func pkgName(p string) string {
	dir, base := path.Split(p)
	if dir != "" && len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		return path.Base(dir)
	}
	return base
}
