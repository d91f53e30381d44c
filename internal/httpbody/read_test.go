package httpbody

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// ReadUpTo must read what io.ReadAll(io.LimitReader(r, max)) reads,
// whatever the declared length says, and pass on the reader's errors.
func TestReadUpTo(t *testing.T) {
	body := strings.Repeat("x", 700)
	tests := []struct {
		name     string
		r        func() io.Reader
		max      int64
		declared int64
	}{
		{name: "declared exactly", r: func() io.Reader { return strings.NewReader(body) }, max: 1025, declared: 700},
		{name: "none declared", r: func() io.Reader { return strings.NewReader(body) }, max: 1025, declared: -1},
		{name: "declared short of the body", r: func() io.Reader { return strings.NewReader(body) }, max: 1025, declared: 10},
		{name: "declared past the body", r: func() io.Reader { return strings.NewReader(body) }, max: 1025, declared: 900},
		{name: "longer than max", r: func() io.Reader { return strings.NewReader(body) }, max: 513, declared: 512},
		{name: "longer than max, none declared", r: func() io.Reader { return strings.NewReader(body) }, max: 100, declared: -1},
		{name: "a byte at a time", r: func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }, max: 1025, declared: 700},
		{name: "empty", r: func() io.Reader { return strings.NewReader("") }, max: 1025, declared: 0},
		{name: "failing reader", r: func() io.Reader { return iotest.TimeoutReader(strings.NewReader(body)) }, max: 1025, declared: 700},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := io.ReadAll(io.LimitReader(tc.r(), tc.max))
			got, err := ReadUpTo(tc.r(), tc.max, tc.declared)
			if !errors.Is(err, wantErr) {
				t.Fatalf("err = %v, want %v", err, wantErr)
			}
			if wantErr == nil && !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, want %d", len(got), len(want))
			}
		})
	}
}
