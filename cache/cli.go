package cache

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// EnvDir is the environment variable that sets the disk cache directory.
const EnvDir = "TENSORBRIDGE_CACHE_DIR"

// DefaultDir returns the disk cache directory: $TENSORBRIDGE_CACHE_DIR if
// set, else "tensorbridge/compile" under the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache on Linux). getenv is os.Getenv outside
// tests.
func DefaultDir(getenv func(string) string) (string, error) {
	if d := getenv(EnvDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("compile cache: no directory: set %s (%v)", EnvDir, err)
	}
	return filepath.Join(base, "tensorbridge", "compile"), nil
}

// ErrUsage matches errors in the command line given to Command; a CLI
// exits with status 2 on them.
var ErrUsage = errors.New("usage")

const commandUsage = `usage: tensorbridge cache COMMAND [--dir DIR] [--json]

Commands:
  ls      list entries, most recently used first
  stats   entries, size, and hit/miss/compile-time totals of every process
  clear   remove every entry

--dir defaults to $` + EnvDir + `, else the user cache directory's tensorbridge/compile.
`

// Command runs the `tensorbridge cache` subcommands: ls, stats, clear. args
// are the words after "cache". Output goes to stdout; usage to stderr.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, commandUsage)
		return fmt.Errorf("%w: missing command (ls, stats or clear)", ErrUsage)
	}
	sub := args[0]
	if sub == "-h" || sub == "--help" || sub == "help" {
		fmt.Fprint(stderr, commandUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("cache "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, commandUsage) }
	dir := fs.String("dir", "", "cache directory")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if *dir == "" {
		d, err := DefaultDir(os.Getenv)
		if err != nil {
			return err
		}
		*dir = d
	}
	d, err := OpenDisk(*dir, DiskOptions{})
	if err != nil {
		return err
	}
	switch sub {
	case "ls":
		return commandList(d, *asJSON, stdout)
	case "stats":
		return commandStats(d, *asJSON, stdout)
	case "clear":
		n, b, err := d.Clear(ctx)
		if *asJSON {
			if jerr := writeJSON(stdout, map[string]any{"dir": d.Dir(), "removed": n, "bytes": b}); jerr != nil {
				return jerr
			}
		} else {
			fmt.Fprintf(stdout, "removed %d entries (%s) from %s\n", n, errs.Bytes(uint64(b)), d.Dir())
		}
		return err
	default:
		fmt.Fprint(stderr, commandUsage)
		return fmt.Errorf("%w: unknown command %q (want ls, stats or clear)", ErrUsage, sub)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func commandList(d *Disk, asJSON bool, w io.Writer) error {
	es, err := d.List()
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, es)
	}
	if len(es) == 0 {
		fmt.Fprintf(w, "no entries in %s\n", d.Dir())
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tNAME\tBACKEND\tDEVICE\tINPUTS\tSIZE\tCOMPILE\tLAST USED")
	for _, e := range es {
		if e.Problem != "" {
			fmt.Fprintf(tw, "%s\tCORRUPT\t\t\t\t%s\t\t%s\t%s\n", e.Digest[:12], errs.Bytes(uint64(e.Size)), e.LastUsed.Format(time.DateTime), e.Problem)
			continue
		}
		backend := e.Key.Backend
		if e.Key.Plugin != "" {
			backend += "/" + e.Key.Plugin
		}
		if e.Key.PluginVersion != "" {
			backend += " " + e.Key.PluginVersion
		}
		dev := e.Key.DeviceKind
		if e.Key.Topology != "" {
			dev += " " + e.Key.Topology
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Digest[:12], e.Key.Name, backend, dev,
			strings.Join(e.Key.InputSpecs, " "), errs.Bytes(uint64(e.Size)), e.CompileTime.Round(time.Millisecond),
			e.LastUsed.Format(time.DateTime))
	}
	return tw.Flush()
}

func commandStats(d *Disk, asJSON bool, w io.Writer) error {
	u, err := d.Usage()
	if err != nil {
		return err
	}
	tot, err := ReadStats(d.Dir())
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, map[string]any{"dir": d.Dir(), "usage": u, "totals": tot})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "directory\t%s\n", d.Dir())
	fmt.Fprintf(tw, "entries\t%d (%d corrupt)\n", u.Entries, u.Corrupt)
	fmt.Fprintf(tw, "size\t%s\n", errs.Bytes(uint64(u.Bytes)))
	fmt.Fprintf(tw, "compile time stored\t%s (saved by one hit on each entry)\n", u.CompileTimeStored.Round(time.Millisecond))
	if u.Entries > 0 {
		fmt.Fprintf(tw, "last used\t%s .. %s\n", u.Oldest.Format(time.DateTime), u.Newest.Format(time.DateTime))
	}
	if tot.Since.IsZero() {
		fmt.Fprintf(tw, "totals\tnone flushed yet (processes write them when their cache closes)\n")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "totals since\t%s, all processes\n", tot.Since.Format(time.DateTime))
	fmt.Fprintf(tw, "hits\t%d\n", tot.Hits)
	fmt.Fprintf(tw, "misses\t%d\n", tot.Misses)
	fmt.Fprintf(tw, "corrupt\t%d\n", tot.Corrupt)
	fmt.Fprintf(tw, "writes\t%d\n", tot.Puts)
	fmt.Fprintf(tw, "evictions\t%d (%s)\n", tot.Evictions, errs.Bytes(uint64(tot.EvictedBytes)))
	fmt.Fprintf(tw, "compile time spent\t%s (of the entries written)\n", tot.CompileTimeStored.Round(time.Millisecond))
	fmt.Fprintf(tw, "compile time saved\t%s\n", tot.CompileTimeSaved.Round(time.Millisecond))
	return tw.Flush()
}
