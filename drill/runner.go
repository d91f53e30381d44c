package drill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The environment a runner is started with (see the package documentation).
const (
	envURL       = "RECONCILER_DRILL_URL"
	envToken     = "RECONCILER_DRILL_TOKEN"
	envPollMS    = "RECONCILER_DRILL_POLL_MS"
	envWaitMS    = "RECONCILER_DRILL_WAIT_MS"
	envRetries   = "RECONCILER_DRILL_RETRIES"
	envBackoffMS = "RECONCILER_DRILL_BACKOFF_MS"
)

// Bounds of a runner's life: how long it may take to greet, and to exit
// once its stdin is closed.
const (
	helloTimeout = 10 * time.Second
	exitTimeout  = 3 * time.Second
)

// runnerSpec is the command of a runner: a program that speaks the runner
// protocol on its stdin and stdout.
type runnerSpec struct {
	runtime string // the runtime's name, for messages
	path    string
	args    []string
	env     []string // added to the inherited environment
}

// runner is a runtime in another process: ops go to its stdin as JSON
// lines, answers come back on its stdout in any order, matched by id.
// Its goroutines (the stdout and stderr readers) end when the process
// does; close ends the process.
type runner struct {
	spec  runnerSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wmu   sync.Mutex // one line at a time on stdin

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan reply
	failed  error // why the runner is gone; set before dead is closed

	caps []string // the greeting's capabilities

	dead       chan struct{} // closed when stdout ended
	stderrDone chan struct{}
	stderr     *tail
}

// startRunner starts spec for one drill environment and waits for its
// greeting; a runner that does not greet with ProtocolVersion is refused.
func startRunner(ctx context.Context, spec runnerSpec, re runtimeEnv) (_ *runner, err error) {
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Env = append(os.Environ(),
		envURL+"="+re.URL, envToken+"="+re.Token,
		envPollMS+"="+strconv.Itoa(agentPollMS), envWaitMS+"="+strconv.Itoa(agentWaitMS),
		envRetries+"="+strconv.Itoa(agentRetries), envBackoffMS+"="+strconv.Itoa(agentBackoffMS),
		// Everything a drill talks to is on loopback: a proxy set for the
		// machine must not see it.
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	)
	cmd.Env = append(cmd.Env, spec.env...)
	r := &runner{
		spec: spec, cmd: cmd, pending: map[uint64]chan reply{},
		dead: make(chan struct{}), stderrDone: make(chan struct{}), stderr: &tail{max: 4096},
	}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start runner %s: %w", spec.path, err)
	}
	go func() {
		defer close(r.stderrDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			re.Log.Debug("runner stderr", "line", sc.Text())
			r.stderr.add(sc.Text())
		}
	}()
	hellos := make(chan hello, 1)
	go r.read(stdout, hellos)
	defer func() {
		if err != nil {
			_ = r.close()
		}
	}()
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	select {
	case h := <-hellos:
		if h.Protocol != ProtocolVersion {
			return nil, fmt.Errorf("runner %s speaks protocol %d, this harness %d", spec.path, h.Protocol, ProtocolVersion)
		}
		re.Log.Debug("runner started", "runner", h.Runtime, "client", h.Client, "capabilities", h.Capabilities, "pid", cmd.Process.Pid)
		r.caps = h.Capabilities
		return r, nil
	case <-r.dead:
		return nil, r.failure()
	case <-t.C:
		return nil, fmt.Errorf("runner %s did not greet within %s%s", spec.path, helloTimeout, r.stderr.suffix())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read reads the runner's stdout: the greeting, then one answer a line,
// each handed to the op waiting for it. A line that is not the protocol's
// ends the runner: what it meant is not known.
func (r *runner) read(stdout io.Reader, hellos chan<- hello) {
	defer close(r.dead)
	br := bufio.NewReader(stdout)
	greeted := false
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if perr := r.line(line, &greeted, hellos); perr != nil {
				r.fail(perr)
				_ = r.cmd.Process.Kill()
				_, _ = io.Copy(io.Discard, br)
				return
			}
		}
		if err != nil {
			r.fail(errors.New("the runner exited"))
			return
		}
	}
}

func (r *runner) line(line []byte, greeted *bool, hellos chan<- hello) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // scrubbed arguments keep their numbers as written
	if !*greeted {
		var h hello
		if err := dec.Decode(&h); err != nil {
			return fmt.Errorf("runner greeted with %.200q: %w", line, err)
		}
		*greeted = true
		hellos <- h
		return nil
	}
	var a reply
	if err := dec.Decode(&a); err != nil {
		return fmt.Errorf("runner wrote %.200q, not an answer: %w", line, err)
	}
	r.mu.Lock()
	ch, ok := r.pending[a.ID]
	delete(r.pending, a.ID)
	r.mu.Unlock()
	if ok {
		ch <- a // buffered: the op may have given up
	}
	// An answer nobody waits for is one whose op's ctx ended.
	return nil
}

// fail records why the runner is gone (the first reason wins).
func (r *runner) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil {
		r.failed = err
	}
}

// failure is the error of a runner that is gone, with what it said last.
func (r *runner) failure() error {
	<-r.stderrDone // its last words are in
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Errorf("runtime %s: %w%s", r.spec.runtime, r.failed, r.stderr.suffix())
}

func (r *runner) run(ctx context.Context, o op) (reply, error) {
	r.mu.Lock()
	r.next++
	o.ID = r.next
	ch := make(chan reply, 1)
	r.pending[o.ID] = ch
	r.mu.Unlock()
	forget := func() {
		r.mu.Lock()
		delete(r.pending, o.ID)
		r.mu.Unlock()
	}
	line, err := json.Marshal(o)
	if err != nil {
		forget()
		return reply{}, fmt.Errorf("encode %s: %w", o.Op, err)
	}
	r.wmu.Lock()
	_, err = r.stdin.Write(append(line, '\n'))
	r.wmu.Unlock()
	if err != nil {
		forget()
		select {
		case <-r.dead:
			return reply{}, r.failure()
		default:
			return reply{}, fmt.Errorf("runtime %s: write op: %w", r.spec.runtime, err)
		}
	}
	select {
	case a := <-ch:
		return a, nil
	case <-r.dead:
		select {
		case a := <-ch: // answered just before it went
			return a, nil
		default:
			return reply{}, r.failure()
		}
	case <-ctx.Done():
		forget()
		return reply{}, ctx.Err()
	}
}

func (r *runner) has(capability string) bool { return slices.Contains(r.caps, capability) }

// close ends the runner: its stdin closes, which a runner takes as the
// end; one that does not exit in time is killed.
func (r *runner) close() error {
	_ = r.stdin.Close()
	t := time.NewTimer(exitTimeout)
	defer t.Stop()
	select {
	case <-r.dead:
	case <-t.C:
		_ = r.cmd.Process.Kill()
		<-r.dead
	}
	<-r.stderrDone
	if err := r.cmd.Wait(); err != nil {
		return fmt.Errorf("runtime %s: %w%s", r.spec.runtime, err, r.stderr.suffix())
	}
	return nil
}

// tail keeps the last max bytes of a runner's stderr, whole lines.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
	size  int
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for t.size > t.max && len(t.lines) > 1 {
		t.size -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

// suffix is "; its stderr: …" for the message of an error, or "".
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return "; its stderr: " + strings.Join(t.lines, "\n")
}
