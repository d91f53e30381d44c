package vendors

import (
	"fmt"
	"strconv"
	"strings"

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

// decoder reads YAML nodes into Profile strictly with the shared walk
// (yamlnode.Decoder): unknown and duplicate keys, wrong kinds and bad values
// are errors naming their line; it records the position of every key it
// sets, so a merge knows what an entry set and validation can point at it.
type decoder struct {
	yamlnode.Decoder
	file string
	pos  map[string]Pos
	errs []*Error
}

// profileScalars are a profile's value rules: whole numbers (max_key_len),
// no negative durations, a null clears a value, and an error quotes at most
// 40 bytes of what was written.
var profileScalars = yamlnode.Scalars{Ints: true, NoNegativeDurations: true, BlankIsZero: true, RawText: true, QuoteLimit: 40}

// newDecoder reads file (for positions) with at most budget nodes; expand
// (nil for none) rewrites each value as written.
func newDecoder(file string, expand func(string) (string, error), budget int) *decoder {
	d := &decoder{file: file, pos: map[string]Pos{}}
	d.Decoder = yamlnode.Decoder{
		Scalars: profileScalars,
		Budget:  budget,
		Expand:  expand,
		Fail:    func(line int, path, msg string) { d.fail(line, path, "%s", msg) },
		TooLarge: func(line int, path string) {
			d.fail(line, path, "profile too large")
		},
		Seen: func(path string, line int) { d.pos[path] = Pos{File: d.file, Line: line} },
	}
	return d
}

func (d *decoder) fail(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: Pos{File: d.file, Line: line}, Path: path, Msg: fmt.Sprintf(format, args...)})
}
