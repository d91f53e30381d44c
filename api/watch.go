package api

import "sync"

// watchers wakes long-polling claims when a request through this Server
// changes their row (an outcome, a resolution). Changes made elsewhere
// (webhooks on another replica, the resolver) are seen by polling.
type watchers struct {
	mu sync.Mutex
	m  map[string]*watchEntry
}

type watchEntry struct {
	ch chan struct{}
	n  int
}

func newWatchers() *watchers { return &watchers{m: make(map[string]*watchEntry)} }

func watchKey(tenant, key string) string { return tenant + "\x1f" + key }

// watch returns a channel closed at the next signal for the row, and a
// release func that must be called once the caller stops waiting on it.
// Register before reading the row, so no signal falls between read and wait.
func (w *watchers) watch(tenant, key string) (<-chan struct{}, func()) {
	k := watchKey(tenant, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[k]
	if !ok {
		e = &watchEntry{ch: make(chan struct{})}
		w.m[k] = e
	}
	e.n++
	var once sync.Once
	return e.ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if cur, ok := w.m[k]; ok && cur == e {
				if e.n--; e.n == 0 {
					delete(w.m, k)
				}
			}
		})
	}
}

// signal wakes every waiter of the row.
func (w *watchers) signal(tenant, key string) {
	k := watchKey(tenant, key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.m[k]; ok {
		close(e.ch)
		delete(w.m, k)
	}
}
