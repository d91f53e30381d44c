//go:build !unix

package httpload

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }

func runQueueWait() (time.Duration, bool) { return 0, false }
