package httpbody

import (
	"errors"
	"io"
)

// ReadUpTo is io.ReadAll(io.LimitReader(r, max)) whose buffer starts at
// the body's declared length (and a byte, to see a longer body go on, or
// meet EOF): a body its sender sized is read into one allocation. A
// declared length ≤ 0 is unknown (the buffer starts at 512 bytes and grows
// as ReadAll's does). Reading stops at max bytes without an error: the
// caller compares the length with its own limit. A reader's error other
// than EOF is returned with the bytes read before it.
func ReadUpTo(r io.Reader, max, declared int64) ([]byte, error) {
	size := int64(512)
	if declared > 0 {
		size = min(declared+1, max)
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as ReadAll does
		}
		end := min(int64(cap(b)), max)
		if int64(len(b)) >= end {
			return b, nil // max bytes read: the caller sees the body is too long
		}
		n, err := r.Read(b[len(b):end])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
	}
}
