package pjrt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/discover"
)

// Loading a PJRT plugin runs its C++ constructors, and a plugin that is
// broken (truncated, built for another machine, linked against libraries
// this host lacks, of another PJRT API version) can abort the process that
// loads it. ProbePlugin therefore loads the plugin in a child process first:
// it runs this program's own executable (os.Executable) with EnvProbe naming
// the plugin; the init function in probe_child.go, which every program
// importing this package runs, sees the variable, loads the plugin, prints
// what it learned as one JSON object on stdout and exits before main. A
// crash or a hang then costs the child, not the caller, and becomes a
// classified *ProbeError.

// Environment variables of the child-process probe.
const (
	// EnvProbe, set to a plugin path, makes a program that imports this
	// package probe that plugin and exit before main runs. ProbePlugin sets
	// it for its child; nothing else should.
	EnvProbe = "TENSORBRIDGE_PJRT_PROBE"
	// EnvProbeClient set to "1" makes the probe also create a PJRT client and
	// list its devices.
	EnvProbeClient = "TENSORBRIDGE_PJRT_PROBE_CLIENT"
	// EnvNoProbe set to "1" makes Driver.Open load plugins in-process
	// without probing them in a child process first (saves the child's
	// load time; a broken plugin may then crash the process).
	EnvNoProbe = "TENSORBRIDGE_PJRT_NO_PROBE"
	// envProbeTestFault makes the probe child misbehave, for tests of the
	// parent's handling: "sleep" (hang before loading), "kill" (die by
	// SIGKILL), "silent" (exit 0 without answering), "garbage" (answer with
	// invalid JSON). Only read in the child.
	envProbeTestFault = "TENSORBRIDGE_PJRT_PROBE_TEST_FAULT"
)

// DefaultProbeTimeout bounds a probe when ProbeOptions.Timeout is 0. libtpu
// (467 MB) takes 0.6 to 1.7 s to load on a 2-core VM (docs/pjrt-findings.md);
// the margin is for loaded machines and slow disks.
const DefaultProbeTimeout = 20 * time.Second

// probeMarker starts every line of the child's protocol on stdout, so that
// whatever a plugin itself prints there is ignored.
const probeMarker = "tensorbridge-pjrt-probe:"

// ProbeOptions says how to probe a plugin.
type ProbeOptions struct {
	// Name is the plugin name ("cpu", "tpu", "cuda"); "" derives it from the
	// file name with discover.PluginName. For "tpu" the child gets
	// TPU_SKIP_MDS_QUERY=1 unless the variable is set or a TPU device node
	// exists: off a TPU VM, libtpu otherwise retries the GCE metadata server
	// for minutes. Without a TPU it also gets ALLOW_MULTIPLE_LIBTPU_LOAD=1,
	// so that concurrent processes loading libtpu do not fail on its lock file.
	Name string
	// CreateClient also creates a PJRT client and lists its devices. On an
	// accelerator this takes the devices for the child's lifetime and fails
	// if another process holds them; leave it false to check loading only.
	CreateClient bool
	// Timeout bounds the child; 0 means DefaultProbeTimeout. When it passes,
	// the child (and its process group, on Unix) is killed.
	Timeout time.Duration
	// Env lists extra KEY=VALUE entries for the child's environment, after
	// the caller's own.
	Env []string
}

// ProbeFailure classifies why a plugin failed its probe. It is also an
// error value, so that errors.Is(err, pjrt.ProbeTimedOut) works on the
// error ProbePlugin returns.
type ProbeFailure string

// Probe failure kinds.
const (
	// ProbeNotFound: the file does not exist or cannot be read.
	ProbeNotFound ProbeFailure = "not-found"
	// ProbeNotSharedLibrary: empty, not ELF (an HTML page, a wheel, a
	// linker script...), truncated, or an ELF file that is not a shared
	// library.
	ProbeNotSharedLibrary ProbeFailure = "not-shared-library"
	// ProbeWrongArchitecture: a shared library for another machine or word
	// size.
	ProbeWrongArchitecture ProbeFailure = "wrong-architecture"
	// ProbeMissingSymbol: the library loads but exports no GetPjrtApi, so
	// it is not a PJRT plugin.
	ProbeMissingSymbol ProbeFailure = "missing-symbol"
	// ProbeMissingDependency: the dynamic loader cannot find a library the
	// plugin needs, or finds one that is too old (symbol versions,
	// undefined symbols).
	ProbeMissingDependency ProbeFailure = "missing-dependency"
	// ProbeAPIVersion: the plugin's PJRT C API major version is not the
	// binding's, or its PJRT_Api table is too small to hold the functions
	// tensorbridge calls.
	ProbeAPIVersion ProbeFailure = "api-version"
	// ProbeLoadFailed: loading failed otherwise (GetPjrtApi returned an
	// unusable table, PJRT_Plugin_Initialize failed, the loader refused the
	// file for another reason).
	ProbeLoadFailed ProbeFailure = "load-failed"
	// ProbeCrashed: the child died (a signal, a non-zero exit, or an exit
	// without an answer) before reporting.
	ProbeCrashed ProbeFailure = "crashed"
	// ProbeTimedOut: the child did not answer within the timeout and was
	// killed.
	ProbeTimedOut ProbeFailure = "timed-out"
	// ProbeClientFailed: the plugin loads but PJRT_Client_Create (or listing
	// its devices) failed; ProbeError.Code and Detail carry the plugin's
	// error.
	ProbeClientFailed ProbeFailure = "client-failed"
	// ProbeNotRun: the probe itself could not be carried out (the
	// executable could not be started, or did not answer the protocol).
	// It says nothing about the plugin.
	ProbeNotRun ProbeFailure = "probe-failed"
)

var probeFailureText = map[ProbeFailure]string{
	ProbeNotFound:          "plugin file not found",
	ProbeNotSharedLibrary:  "not a shared library",
	ProbeWrongArchitecture: "wrong architecture",
	ProbeMissingSymbol:     "not a PJRT plugin",
	ProbeMissingDependency: "missing dependency",
	ProbeAPIVersion:        "PJRT API version mismatch",
	ProbeLoadFailed:        "load failed",
	ProbeCrashed:           "crashed while probed",
	ProbeTimedOut:          "probe timed out",
	ProbeClientFailed:      "client creation failed",
	ProbeNotRun:            "could not run the probe",
}

// Error describes the kind in words, e.g. "wrong architecture".
func (f ProbeFailure) Error() string {
	if s, ok := probeFailureText[f]; ok {
		return s
	}
	return string(f)
}

// ProbeError is a plugin that failed its probe: what kind of failure, what
// exactly, and how to fix it. errors.Is matches its Kind (a ProbeFailure)
// and whatever Err wraps.
type ProbeError struct {
	// Path is the plugin file.
	Path string `json:"path"`
	// Kind classifies the failure.
	Kind ProbeFailure `json:"kind"`
	// Stage is the probe step that failed or was running: "preflight" (the
	// ELF header check done before starting a child), "load" (dlopen,
	// GetPjrtApi, version check, PJRT_Plugin_Initialize), "attributes",
	// "client", "devices".
	Stage string `json:"stage,omitempty"`
	// Detail is the precise finding, e.g. "aarch64 (ELF64) plugin on
	// linux/amd64", "needs libcudart.so.13, which the dynamic loader cannot
	// find", the plugin's error message.
	Detail string `json:"detail"`
	// Code is the PJRT error code name ("NOT_FOUND", ...) when the plugin
	// itself reported the failure.
	Code string `json:"code,omitempty"`
	// Fix is a generic remedy; callers that know how the plugin was
	// installed may give a more specific one.
	Fix string `json:"fix,omitempty"`
	// Err is the underlying error, when there is one in this process.
	Err error `json:"-"`
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("pjrt: plugin %s: %s: %s", e.Path, e.Kind.Error(), e.Detail)
}

// Unwrap returns the Kind, so errors.Is(err, ProbeTimedOut) works, and
// Err.
func (e *ProbeError) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// ProbeDevice is a device the probe's client reported.
type ProbeDevice struct {
	ID           int    `json:"id"`
	Kind         string `json:"kind"`
	ProcessIndex int    `json:"process_index"`
}

// ProbeResult is what a probe learned about a plugin. Fields past Loaded
// are set as far as the probe got.
type ProbeResult struct {
	// Path is the plugin file, absolute with symlinks resolved.
	Path string `json:"path"`
	// Name is the plugin name the probe used ("cpu", "tpu", ...; "" if
	// unknown).
	Name string `json:"name,omitempty"`
	// Size and ModTime identify the file version probed.
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
	// Loaded is true when the child loaded the plugin; the API fields
	// below are then valid.
	Loaded bool `json:"loaded"`
	// APIMajor and APIMinor are the plugin's PJRT C API version.
	APIMajor int `json:"api_major"`
	APIMinor int `json:"api_minor"`
	// APIStructSize is its PJRT_Api struct_size; Functions how many
	// function slots that holds.
	APIStructSize int `json:"api_struct_size,omitempty"`
	Functions     int `json:"functions,omitempty"`
	// Attributes are PJRT_Plugin_Attributes, values formatted with %v
	// (e.g. xla_version=2, stablehlo_current_version=[1 20 0]).
	Attributes map[string]string `json:"attributes,omitempty"`
	// Extensions are the extension structs the plugin chains, by name.
	Extensions []string `json:"extensions,omitempty"`
	// Client is true when a client was created (ProbeOptions.CreateClient).
	Client          bool          `json:"client"`
	Platform        string        `json:"platform,omitempty"`
	PlatformVersion string        `json:"platform_version,omitempty"`
	Devices         []ProbeDevice `json:"devices,omitempty"`
	// Stage is the last probe step the child reached ("done" on success).
	Stage string `json:"stage,omitempty"`
	// Elapsed is the probe's wall time, child start to exit.
	Elapsed time.Duration `json:"elapsed_ns,omitempty"`
	// PID is the child's process id, for matching system logs.
	PID int `json:"pid,omitempty"`
	// Stderr holds notable lines (fatal signals, C++ terminate messages,
	// fatal log lines) and the tail of the child's stderr, when the probe
	// failed.
	Stderr string `json:"stderr,omitempty"`
	// Failure is nil when the plugin passed.
	Failure *ProbeError `json:"failure,omitempty"`
}

// OK reports whether the plugin passed its probe.
func (r *ProbeResult) OK() bool { return r != nil && r.Failure == nil }

// APIVersion formats the PJRT C API version as "0.115", or "" when the
// plugin was not loaded.
func (r *ProbeResult) APIVersion() string {
	if r == nil || !r.Loaded {
		return ""
	}
	return fmt.Sprintf("%d.%d", r.APIMajor, r.APIMinor)
}

// ProbePlugin loads the plugin at path in a child process (this program's
// executable re-run with EnvProbe set) and reports what it found. A
// crashing, hanging or unloadable plugin cannot harm the caller.
//
// The result is non-nil whenever a probe was attempted, and holds what was
// learned even on failure (e.g. the API version of a plugin whose client
// could not be created). The error is nil when the plugin passed, a
// *ProbeError (the result's Failure) when it did not, or the context's
// error when ctx ended first. Checks that need no child run first: the file
// must exist and, on ELF systems, start with a shared-library header for
// this machine.
//
// Results are cached for the life of the process by file (absolute path,
// size and modification time) and options, except ProbeNotRun failures and
// cancellations; concurrent probes of the same key run one child.
func ProbePlugin(ctx context.Context, path string, opts ProbeOptions) (*ProbeResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, st := preflight(path)
	if opts.Name != "" {
		res.Name = opts.Name
	}
	if res.Failure != nil {
		return res, res.Failure
	}
	key := probeKey{path: res.Path, size: st.Size(), mtime: st.ModTime().UnixNano(), name: res.Name,
		client: opts.CreateClient, env: strings.Join(opts.Env, "\x00")}
	e := probeCache.entry(key)
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-e.sem }()
	if e.res != nil {
		return e.res.copyOut()
	}
	out, err := runProbe(ctx, res, opts)
	if err != nil {
		return nil, err
	}
	if out.Failure == nil || out.Failure.Kind != ProbeNotRun {
		e.res = out
	}
	return out.copyOut()
}

// copyOut returns a copy of a cached result and its error, sharing no
// map or slice with the cache.
func (r *ProbeResult) copyOut() (*ProbeResult, error) {
	c := *r
	if r.Attributes != nil {
		c.Attributes = make(map[string]string, len(r.Attributes))
		for k, v := range r.Attributes {
			c.Attributes[k] = v
		}
	}
	c.Extensions = append([]string(nil), r.Extensions...)
	c.Devices = append([]ProbeDevice(nil), r.Devices...)
	if c.Failure != nil {
		f := *c.Failure
		c.Failure = &f
		return &c, &f
	}
	return &c, nil
}

type probeKey struct {
	path   string
	size   int64
	mtime  int64
	name   string
	client bool
	env    string
}

// probeEntry serializes probes of one key; sem is a one-slot semaphore so
// that waiting can be abandoned with the context.
type probeEntry struct {
	sem chan struct{}
	res *ProbeResult
}

// probeCacheT holds one entry per probed key.
type probeCacheT struct {
	mu sync.Mutex
	m  map[probeKey]*probeEntry
}

var probeCache = &probeCacheT{m: map[probeKey]*probeEntry{}}

func (c *probeCacheT) entry(k probeKey) *probeEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		e = &probeEntry{sem: make(chan struct{}, 1)}
		c.m[k] = e
	}
	return e
}

// preflight resolves path and checks, without loading anything, that it is
// a regular file and (on ELF systems) a shared library for this machine.
// The result's Failure is set when it is not.
func preflight(path string) (*ProbeResult, os.FileInfo) {
	res := &ProbeResult{Path: path}
	if n, ok := discover.PluginName(path); ok {
		res.Name = n
	}
	fail := func(kind ProbeFailure, detail, fix string, err error) (*ProbeResult, os.FileInfo) {
		res.Failure = &ProbeError{Path: res.Path, Kind: kind, Stage: "preflight", Detail: detail, Fix: fix, Err: err}
		return res, nil
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(ProbeNotFound, "no such file", "install the plugin or correct the path", err)
		}
		return fail(ProbeNotFound, err.Error(), "", err)
	}
	res.Path = abs
	if res.Name == "" {
		if n, ok := discover.PluginName(abs); ok {
			res.Name = n
		}
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fail(ProbeNotFound, err.Error(), "", err)
	}
	if !st.Mode().IsRegular() {
		return fail(ProbeNotSharedLibrary, fmt.Sprintf("not a regular file (mode %v)", st.Mode()), "", nil)
	}
	res.Size, res.ModTime = st.Size(), st.ModTime()
	if !elfOS() {
		return res, st
	}
	f, err := os.Open(abs)
	if err != nil {
		return fail(ProbeNotFound, "cannot read it: "+err.Error(), "check the file's permissions", err)
	}
	hdr := make([]byte, 64)
	n, err := io.ReadFull(f, hdr)
	_ = f.Close()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fail(ProbeNotFound, "cannot read it: "+err.Error(), "", err)
	}
	if kind, detail, fix := checkELFHeader(hdr[:n], st.Size(), runtime.GOOS, runtime.GOARCH); kind != "" {
		return fail(kind, detail, fix, nil)
	}
	return res, st
}

// checkPlugin probes a plugin in a child process before Open loads it in
// this one, unless EnvNoProbe is "1". It returns the *ProbeError of a
// plugin that failed, or the context's error; a probe that could not run
// (ProbeNotRun) lets Open go on as it did without probing. Only loading is
// checked: the client is created in-process, where its errors are values.
func checkPlugin(ctx context.Context, plugin, path string) error {
	if os.Getenv(EnvNoProbe) == "1" {
		return nil
	}
	_, err := ProbePlugin(ctx, path, ProbeOptions{Name: plugin})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var pe *ProbeError
	if errors.As(err, &pe) && pe.Kind == ProbeNotRun {
		return nil
	}
	return err
}
