package pjrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge/internal/capi"
)

// The child side of a probe: the init function that makes this process a
// probe child, loading the plugin and reporting what it learned.

func init() {
	path, ok := os.LookupEnv(EnvProbe)
	if !ok || path == "" {
		return
	}
	os.Exit(probeChild(os.Stdout, path))
}

// probeChild runs in the child: it loads the plugin at path, writes the
// protocol lines to w and returns the exit code (0 once an answer is
// written).
func probeChild(w io.Writer, path string) int {
	withClient := os.Getenv(EnvProbeClient) == "1"
	fault := os.Getenv(envProbeTestFault)
	for _, k := range []string{EnvProbe, EnvProbeClient, envProbeTestFault} {
		_ = os.Unsetenv(k) // anything the plugin starts must not probe again
	}
	stage := func(s string) { fmt.Fprintf(w, "%s stage %s\n", probeMarker, s) }
	res := &ProbeResult{Path: path}
	answer := func() int {
		b, err := json.Marshal(res)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pjrt probe: encoding the result: %v\n", err)
			return 3
		}
		fmt.Fprintf(w, "%s result %s\n", probeMarker, b)
		return 0
	}
	fail := func(kind ProbeFailure, detail, fix string) int {
		res.Failure = &ProbeError{Path: path, Kind: kind, Stage: res.Stage, Detail: detail, Fix: fix}
		return answer()
	}
	next := func(s string) { res.Stage = s; stage(s) }

	if fault == "silent" {
		return 0
	}
	next("start")
	switch fault {
	case "sleep":
		stage("test-sleep")
		time.Sleep(24 * time.Hour)
	case "kill":
		stage("test-kill")
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill()
		}
		time.Sleep(time.Hour)
	case "garbage":
		fmt.Fprintf(w, "%s result {not json\n", probeMarker)
		return 0
	}

	next("load")
	p, err := capi.Load(path)
	if err != nil {
		res.Failure = classifyLoadError(path, err)
		return answer()
	}
	res.Loaded = true
	res.APIMajor, res.APIMinor = p.Version()
	res.APIStructSize, res.Functions = p.APIStructSize(), p.NumFunctions()

	next("attributes")
	if attrs, err := p.Attributes(); err == nil && len(attrs) > 0 {
		res.Attributes = map[string]string{}
		for _, a := range attrs {
			res.Attributes[a.Name] = fmt.Sprint(a.Value)
		}
	}
	for _, x := range p.Extensions() {
		res.Extensions = append(res.Extensions, x.String())
	}
	var missing []string
	for _, f := range essentialFunctions {
		if !p.HasFunction(f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fail(ProbeAPIVersion,
			fmt.Sprintf("its PJRT_Api table (%d bytes, %d functions, PJRT C API %d.%d) lacks %s, which tensorbridge calls", res.APIStructSize, res.Functions, res.APIMajor, res.APIMinor, strings.Join(missing, ", ")),
			"install a newer build of the plugin")
	}
	if !withClient {
		next("done")
		return answer()
	}

	next("client")
	c, err := p.NewClient(context.Background(), nil)
	if err != nil {
		res.Failure = &ProbeError{Path: path, Kind: ProbeClientFailed, Stage: "client", Detail: pjrtMessage(err), Code: pjrtCode(err),
			Fix: "the plugin loads but PJRT_Client_Create failed: check that its device is present and not held by another process and, for GPU plugins, that the CUDA or ROCm libraries are on the loader path"}
		return answer()
	}
	res.Client = true
	res.Platform, _ = c.PlatformName()
	res.PlatformVersion, _ = c.PlatformVersion()
	next("devices")
	devs, err := c.AddressableDevices()
	if err != nil {
		res.Failure = &ProbeError{Path: path, Kind: ProbeClientFailed, Stage: "devices", Detail: pjrtMessage(err), Code: pjrtCode(err)}
		_ = c.Close()
		return answer()
	}
	for _, d := range devs {
		desc := d.Description()
		res.Devices = append(res.Devices, ProbeDevice{ID: desc.ID, Kind: desc.Kind, ProcessIndex: desc.ProcessIndex})
	}
	_ = c.Close()
	next("done")
	return answer()
}

// essentialFunctions are the PJRT_Api entries Open, compilation, transfers
// and execution need; a plugin table without them is unusable.
var essentialFunctions = []string{
	"PJRT_Client_Create", "PJRT_Client_Destroy", "PJRT_Client_AddressableDevices",
	"PJRT_Client_Compile", "PJRT_Client_BufferFromHostBuffer", "PJRT_LoadedExecutable_Execute",
	"PJRT_Buffer_ToHostBuffer", "PJRT_Buffer_Destroy", "PJRT_Event_Await", "PJRT_Event_Destroy",
}

func pjrtMessage(err error) string {
	var pe *capi.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

func pjrtCode(err error) string {
	var pe *capi.Error
	if errors.As(err, &pe) {
		return pe.Code.String()
	}
	return ""
}

// classifyLoadError turns a capi.Load failure into a ProbeError.
func classifyLoadError(path string, err error) *ProbeError {
	pe := &ProbeError{Path: path, Kind: ProbeLoadFailed, Stage: "load", Detail: err.Error()}
	var le *capi.LoadError
	if !errors.As(err, &le) {
		return pe
	}
	msg := le.Err.Error()
	pe.Detail = le.Op + ": " + msg
	switch le.Op {
	case "open":
		pe.Kind = ProbeNotFound
	case "dlopen":
		pe.Kind, pe.Detail, pe.Fix = classifyDlopen(path, msg)
	case "dlsym GetPjrtApi":
		pe.Kind = ProbeMissingSymbol
		pe.Detail = "the library exports no GetPjrtApi function, so it is not a PJRT plugin (" + msg + ")"
		pe.Fix = "remove it from the plugin directory, or point the search path at the PJRT plugin itself"
	case "version check":
		pe.Kind = ProbeAPIVersion
		pe.Detail = msg
		pe.Fix = fmt.Sprintf("install a plugin built for PJRT C API major version %d (the pinned wheels of tensorbridge plugins install are)", capi.HeaderMajor)
	case "GetPjrtApi":
		if errors.Is(le.Err, capi.ErrBadAPIStruct) {
			pe.Kind = ProbeAPIVersion
		}
		pe.Detail = "GetPjrtApi returned an unusable PJRT_Api: " + msg
		pe.Fix = "the plugin is corrupt or not a PJRT plugin: reinstall it"
	case "PJRT_Plugin_Initialize":
		pe.Detail = "PJRT_Plugin_Initialize failed: " + pjrtMessage(le.Err)
		pe.Code = pjrtCode(le.Err)
	}
	return pe
}

// classifyDlopen reads a dynamic loader message (glibc's dlerror text).
func classifyDlopen(path, msg string) (ProbeFailure, string, string) {
	const cannotOpen = ": cannot open shared object file"
	if i := strings.Index(msg, cannotOpen); i > 0 {
		lib := msg[:i]
		if !samePath(lib, path) {
			return ProbeMissingDependency,
				fmt.Sprintf("needs %s, which the dynamic loader cannot find (%s)", lib, msg),
				fmt.Sprintf("install the package that provides %s, or add the directory holding it to LD_LIBRARY_PATH", lib)
		}
		return ProbeNotFound, msg, "check the path and the file's permissions"
	}
	switch {
	case strings.Contains(msg, "version `") && strings.Contains(msg, "' not found"):
		return ProbeMissingDependency,
			"a library it needs is too old on this system: " + msg,
			"use a plugin built for this system's libraries (an older wheel, or a manylinux tag matching this glibc), or upgrade the system"
	case strings.Contains(msg, "undefined symbol: "):
		return ProbeMissingDependency,
			"a symbol it needs is not provided by the libraries it loaded (a dependency of the wrong version?): " + msg,
			"install the dependency versions the plugin was built against"
	case strings.Contains(msg, "wrong ELF class"), strings.Contains(msg, "ELF file data encoding"):
		return ProbeWrongArchitecture, msg, "install the plugin built for " + runtime.GOOS + "/" + runtime.GOARCH
	case strings.Contains(msg, "file too short"), strings.Contains(msg, "invalid ELF header"),
		strings.Contains(msg, "only ET_DYN and ET_EXEC"), strings.Contains(msg, "not a dynamic"),
		strings.Contains(msg, "position-independent executable"):
		return ProbeNotSharedLibrary, msg, "reinstall the plugin (tensorbridge plugins install NAME)"
	}
	return ProbeLoadFailed, msg, ""
}

func samePath(a, b string) bool {
	if a == b {
		return true
	}
	ca, cb := filepath.Clean(a), filepath.Clean(b)
	if ca == cb {
		return true
	}
	if ab, err := filepath.Abs(cb); err == nil {
		if ab == ca {
			return true
		}
		if r, err := filepath.EvalSymlinks(ab); err == nil && r == ca {
			return true
		}
	}
	return false
}
