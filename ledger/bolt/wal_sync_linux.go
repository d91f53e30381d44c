package bolt

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and only the metadata needed to read it back
// (not its times): what a record written inside a preallocated segment needs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
