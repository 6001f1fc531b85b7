package pjrt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tensorbridge/tensorbridge/device"
	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// The parent side of a probe: running the child process and reading its
// protocol output and stderr.

// runProbe starts the child for res.Path and turns its answer, or the lack
// of one, into a result. It returns an error only when ctx ended.
func runProbe(ctx context.Context, res *ProbeResult, opts ProbeOptions) (*ProbeResult, error) {
	notRun := func(detail string, err error) (*ProbeResult, error) {
		res.Failure = &ProbeError{Path: res.Path, Kind: ProbeNotRun, Detail: detail, Err: err}
		return res, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return notRun("cannot find this program's executable to run the probe in: "+err.Error(), err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, exe)
	cmd.Env = probeEnv(res.Path, res.Name, opts)
	var out probeOutput
	var stderr stderrCatcher
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the pipes must not hang Wait
	isolateChild(cmd)
	// The child's parent-death signal (Linux) follows the thread that
	// started it: keep that thread until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return notRun(fmt.Sprintf("cannot start %s: %v", exe, err), err)
	}
	res.PID = cmd.Process.Pid
	werr := cmd.Wait()
	res.Elapsed = time.Since(start)
	out.flush()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	stage := out.lastStage()
	if out.result != nil {
		var got ProbeResult
		if err := json.Unmarshal(out.result, &got); err != nil {
			return notRun(fmt.Sprintf("%s answered the probe with invalid JSON: %v", exe, err), err)
		}
		got.Path, got.Size, got.ModTime, got.Name = res.Path, res.Size, res.ModTime, res.Name
		got.Elapsed, got.PID = res.Elapsed, res.PID
		if got.Failure != nil {
			got.Failure.Path = res.Path
			got.Failure.Err = failureCause(got.Failure)
			got.Stderr = stderr.summary()
		}
		return &got, nil
	}
	res.Stage = stage
	res.Stderr = stderr.summary()
	fail := func(kind ProbeFailure, detail, fix string) (*ProbeResult, error) {
		res.Failure = &ProbeError{Path: res.Path, Kind: kind, Stage: stage, Detail: detail, Fix: fix, Err: werr}
		return res, nil
	}
	const crashFix = "the plugin is broken or does not match this system: reinstall it (tensorbridge plugins install NAME) or remove it from the plugin directory; the stderr lines show the plugin's last words"
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fail(ProbeTimedOut,
			fmt.Sprintf("no answer within %v while %s; the probe process was killed", timeout, stageText(stage)),
			"a slow disk or a plugin waiting on the network (libtpu off a TPU VM needs TPU_SKIP_MDS_QUERY=1): retry with a longer timeout, or check the plugin")
	}
	if stage == "" {
		if werr == nil {
			return notRun(fmt.Sprintf("%s exited without running the probe: it does not run package pjrt's init function (was it replaced by a program that does not import it?)", exe), nil)
		}
		return fail(ProbeCrashed, fmt.Sprintf("the probe process %s before it started: %s", exitText(werr), cmdErrText(werr, &stderr)), crashFix)
	}
	if werr == nil {
		return fail(ProbeCrashed, fmt.Sprintf("the plugin ended the process (exit status 0) while %s, without an answer", stageText(stage)), crashFix)
	}
	detail := fmt.Sprintf("the probe process %s while %s", exitText(werr), stageText(stage))
	if notes := stderr.notable(); notes != "" {
		detail += ": " + notes
	}
	return fail(ProbeCrashed, detail, crashFix)
}

// failureCause rebuilds a plugin error reported by the child, so that
// errors.Is with capi's code sentinels works in the parent too.
func failureCause(f *ProbeError) error {
	if f.Code == "" {
		return nil
	}
	for c := capi.CodeOK; c <= capi.CodeUnauthenticated; c++ {
		if c.String() == f.Code {
			return &capi.Error{Code: c, Message: f.Detail}
		}
	}
	return nil
}

// probeEnv is the child's environment: the caller's, without probe
// variables, plus the probe's.
func probeEnv(path, name string, opts ProbeOptions) []string {
	var env []string
	has := map[string]bool{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == EnvProbe || k == EnvProbeClient || k == envProbeTestFault {
			continue
		}
		has[k] = true
		env = append(env, kv)
	}
	env = append(env, EnvProbe+"="+path)
	if opts.CreateClient {
		env = append(env, EnvProbeClient+"=1")
	}
	if !has["TF_CPP_MIN_LOG_LEVEL"] {
		env = append(env, "TF_CPP_MIN_LOG_LEVEL=2") // warnings and errors only
	}
	if name == "tpu" && !tpuNodesPresent() {
		if !has["TPU_SKIP_MDS_QUERY"] {
			env = append(env, "TPU_SKIP_MDS_QUERY=1")
		}
		// With no TPU chip to share, libtpu's single-user lock file
		// (/tmp/libtpu_lockfile) protects nothing, yet makes a second
		// process loading libtpu at the same time (a compile for a slice, a
		// parallel test) fail to initialise. libtpu honours this variable.
		if !has["ALLOW_MULTIPLE_LIBTPU_LOAD"] {
			env = append(env, "ALLOW_MULTIPLE_LIBTPU_LOAD=1")
		}
	}
	return append(env, opts.Env...)
}

func tpuNodesPresent() bool {
	for _, k := range Kinds {
		if k.Platform != device.TPU {
			continue
		}
		for _, p := range k.Nodes {
			if m, _ := filepath.Glob(p); len(m) > 0 {
				return true
			}
		}
	}
	return false
}

// stageText says in words what the child was doing at a stage.
func stageText(stage string) string {
	switch stage {
	case "start":
		return "starting"
	case "load":
		return "loading the plugin (dlopen, GetPjrtApi, PJRT_Plugin_Initialize)"
	case "attributes":
		return "reading the plugin's attributes"
	case "client":
		return "creating a client (PJRT_Client_Create)"
	case "devices":
		return "listing the client's devices"
	case "done":
		return "exiting after the probe"
	case "":
		return "starting"
	}
	return "at stage " + stage
}

// exitText describes how the child ended: "was killed by signal 9
// (killed)", "exited with status 2".
func exitText(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "failed (" + err.Error() + ")"
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}

func cmdErrText(err error, stderr *stderrCatcher) string {
	if n := stderr.notable(); n != "" {
		return n
	}
	return err.Error()
}

// probeOutput collects the child's protocol lines from its stdout and
// drops everything else the plugin may print there.
type probeOutput struct {
	partial []byte
	stages  []string
	result  []byte
}

// maxProtocolLine bounds a protocol line (the result JSON): 1 MiB.
const maxProtocolLine = 1 << 20

func (o *probeOutput) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxProtocolLine - len(o.partial)
			o.partial = append(o.partial, p[:max(0, min(len(p), room))]...)
			break
		}
		room := maxProtocolLine - len(o.partial)
		o.partial = append(o.partial, p[:max(0, min(i, room))]...)
		o.line(o.partial)
		o.partial = o.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (o *probeOutput) flush() {
	if len(o.partial) > 0 {
		o.line(o.partial)
		o.partial = nil
	}
}

func (o *probeOutput) line(l []byte) {
	rest, ok := bytes.CutPrefix(l, []byte(probeMarker+" "))
	if !ok {
		return
	}
	switch {
	case bytes.HasPrefix(rest, []byte("stage ")):
		o.stages = append(o.stages, string(bytes.TrimSpace(rest[len("stage "):])))
	case bytes.HasPrefix(rest, []byte("result ")):
		o.result = append([]byte(nil), rest[len("result "):]...)
	}
}

func (o *probeOutput) lastStage() string {
	if len(o.stages) == 0 {
		return ""
	}
	return o.stages[len(o.stages)-1]
}

// stderrCatcher keeps the child's stderr lines that explain a crash (at
// most 8) and its last 20 lines, each cut to 400 bytes.
type stderrCatcher struct {
	partial []byte
	notes   []string
	tail    []string
}

func (s *stderrCatcher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.partial) < 400 {
				s.partial = append(s.partial, p[:min(len(p), 400-len(s.partial))]...)
			}
			break
		}
		if len(s.partial) < 400 {
			s.partial = append(s.partial, p[:min(i, 400-len(s.partial))]...)
		}
		s.line(string(s.partial))
		s.partial = s.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (s *stderrCatcher) line(l string) {
	l = strings.TrimRight(l, "\r ")
	if l == "" {
		return
	}
	if notableLine(l) && len(s.notes) < 8 {
		s.notes = append(s.notes, l)
	}
	s.tail = append(s.tail, l)
	if len(s.tail) > 20 {
		s.tail = s.tail[1:]
	}
}

// notableLine recognises lines that say why a process died: Go's fatal
// signal report ("SIGSEGV: segmentation violation"), Go fatal errors, C++
// std::terminate, abseil/glog fatal lines ("F1121 13:37:00.1 ...") and
// failed checks.
func notableLine(l string) bool {
	if strings.HasPrefix(l, "SIG") && strings.Contains(l, ": ") {
		return true
	}
	for _, p := range []string{"fatal error:", "terminate called", "what():", "Check failed", "panic:", "Segmentation fault", "Aborted"} {
		if strings.Contains(l, p) {
			return true
		}
	}
	if len(l) > 5 && l[0] == 'F' && l[1] >= '0' && l[1] <= '9' && l[2] >= '0' && l[2] <= '9' && l[3] >= '0' && l[3] <= '9' && l[4] >= '0' && l[4] <= '9' {
		return true
	}
	return false
}

func (s *stderrCatcher) notable() string { return strings.Join(s.notes, "; ") }

func (s *stderrCatcher) summary() string {
	if len(s.partial) > 0 {
		s.line(string(s.partial))
		s.partial = nil
	}
	var b strings.Builder
	for _, l := range s.notes {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if len(s.notes) > 0 && len(s.tail) > 0 {
		b.WriteString("...\n")
	}
	for _, l := range s.tail {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}
