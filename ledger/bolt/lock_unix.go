//go:build unix

package bolt

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockExisting takes the exclusive lock bbolt takes (flock) on the file at
// path, if there is one, without waiting: a running node holds it, and a
// node starting later waits until unlock. A missing file needs no lock.
func lockExisting(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w (a running node holds it; stop it first)", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
