// Command tensorbridge inspects this host's accelerators and runs, serves,
// trains and plans models on them.
//
//	tensorbridge devices [--json]     hardware found, per device, with problems
//	tensorbridge doctor [--json]      what is missing and the exact fix
//	tensorbridge version [--json]     build and dependency versions
//	tensorbridge train MODEL --data DIR --steps N --batch B --loss SPEC
//	                                  fine-tune a model's weights, checkpoints, resume
//
// Every command that opens a backend takes --backend NAME (or the
// TENSORBRIDGE_BACKEND environment variable); the default is auto.
//
// On Linux the command re-executes itself once with glibc malloc tunables
// that let XLA's CPU runtime reuse memory between executions (malloc.go);
// TENSORBRIDGE_MALLOC=system, or a GLIBC_TUNABLES of your own, keeps yours.
//
// The command sets TF_CPP_MIN_LOG_LEVEL=2 (plugins log warnings and errors
// only) and, for plan, TPU_SKIP_MDS_QUERY=1, ALLOW_MULTIPLE_LIBTPU_LOAD=1 or
// XLA_FLAGS=--xla_gpu_cuda_data_dir=DIR, each unless already set, before any
// plugin loads (procenv.go); the library never changes the environment.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	_ "github.com/tensorbridge/tensorbridge/pjrt" // registers xla-cpu, tpu, cuda, rocm
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

// exitError carries a process exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	reexecWithMallocTunables() // malloc.go
	setPluginEnv()             // procenv.go: before any plugin loads
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Main runs the CLI with args and returns the exit code: 0 on success, 1 on
// failure, 2 on a usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		if err == nil {
			return 0
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintf(stderr, "tensorbridge %s: %v\n", c.name, ee.err)
			}
			return ee.code
		}
		fmt.Fprintf(stderr, "tensorbridge %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "tensorbridge: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "tensorbridge runs ML models on TPUs, GPUs and CPUs.")
	fmt.Fprintln(w, "\nUsage: tensorbridge COMMAND [flags] [args]\n\nCommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'tensorbridge COMMAND -h' for a command's flags.")
	fmt.Fprintln(w, "Environment: TENSORBRIDGE_BACKEND picks the backend; TENSORBRIDGE_MALLOC=system keeps the C\nlibrary's malloc settings (by default tensorbridge runs with glibc tunables that reuse memory).")
}

// newFlags makes a FlagSet that reports errors as usage errors.
func newFlags(name string, stderr io.Writer, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tensorbridge %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, turning a parse failure into exit code 2. A command
// run by commandFlags ends here, once its flags are parsed.
func parse(fs *flag.FlagSet, args []string) error {
	probe, _ := fs.Output().(*flagProbe)
	if probe != nil {
		probe.fs = fs
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2}
	}
	if probe != nil {
		return errFlagsParsed
	}
	return nil
}

// flagProbe is the stderr commandFlags runs a command with: parse, finding
// it as the FlagSet's output, records the FlagSet and ends the command.
type flagProbe struct {
	bytes.Buffer
	fs *flag.FlagSet
}

// errFlagsParsed ends a command run by commandFlags once its flags parsed.
var errFlagsParsed = errors.New("flags parsed; command not run")

// commandFlags parses args, the words after `tensorbridge NAME`, with the
// flags command name defines, and returns its FlagSet without running the
// command (the docs test checks every documented command line with it).
// The error is flag.ErrHelp for -h, or what the command would report: a
// flag the command does not define, a value its flag does not take, an
// unknown sub-command. The FlagSet is returned with a parse error too.
//
// Every command but cache parses its flags through parse, which ends it
// there (its context is cancelled too, so that one that did not would stop
// early). cache.Command parses its own: it is given args then "-h -h", so
// that it stops at help once args parse (the second -h in case the first
// is taken as a flag's value), and the FlagSet is nil.
func commandFlags(name string, args []string) (*flag.FlagSet, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range commands {
		if c.name != name {
			continue
		}
		probe := &flagProbe{}
		if name == "cache" {
			if len(args) == 0 || (args[0] != "ls" && args[0] != "stats" && args[0] != "clear") {
				return nil, usageErr("want `cache ls`, `cache stats` or `cache clear`")
			}
			args = append(append([]string{}, args...), "-h", "-h")
		}
		err := c.run(ctx, args, io.Discard, probe)
		switch {
		case errors.Is(err, errFlagsParsed):
			return probe.fs, nil
		case errors.Is(err, flag.ErrHelp) && name == "cache":
			return nil, nil
		case errors.Is(err, flag.ErrHelp):
			return probe.fs, err
		case err == nil:
			return probe.fs, fmt.Errorf("tensorbridge %s ran without parsing its flags through parse", name)
		}
		var ee *exitError
		if errors.As(err, &ee) && ee.err == nil { // the flag package's message went to probe
			msg, _, _ := strings.Cut(strings.TrimSpace(probe.String()), "\n")
			return probe.fs, errors.New(msg)
		}
		return probe.fs, err
	}
	return nil, fmt.Errorf("unknown command %q", name)
}

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
