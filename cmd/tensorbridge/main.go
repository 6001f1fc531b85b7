// Command tensorbridge inspects the accelerators of this host and runs
// models on them.
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

// parse parses flags, turning a parse failure into exit code 2.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: 2}
	}
	return nil
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
