package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The documentation the docs tests read: the README and every page of
// docs/, relative to the repository's root.
const repoRoot = "../.."

// docFiles returns the README and docs/*.md, as paths relative to the
// repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 2 {
		t.Fatalf("found no docs/*.md under %s", repoRoot)
	}
	return files
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdLine is one line of a Markdown file, with where it sits.
type mdLine struct {
	no     int    // 1-based line number
	text   string // the line
	fenced bool   // inside a fenced code block (fence lines excluded)
	lang   string // the block's info string's first word, when fenced
	fence  bool   // an opening or closing fence
}

var fenceRE = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^`\\s]*)")

// mdLines splits a Markdown text into lines marked by fenced code block.
func mdLines(text string) []mdLine {
	var out []mdLine
	open, lang := "", ""
	for i, l := range strings.Split(text, "\n") {
		ln := mdLine{no: i + 1, text: l}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			switch {
			case open == "":
				open, lang = m[1][:1], strings.ToLower(m[2])
				ln.fence = true
			case m[1][:1] == open && strings.TrimSpace(l) == strings.TrimSpace(m[1]):
				open, lang = "", ""
				ln.fence = true
			}
		}
		if !ln.fence && open != "" {
			ln.fenced, ln.lang = true, lang
		}
		out = append(out, ln)
	}
	return out
}

// shellLangs are the fenced blocks that hold command lines (or their
// output); others (go, python, json, yaml) are not read for commands.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true, "text": true, "sh-session": true}

// docCommand is one `tensorbridge SUBCOMMAND ...` found in a code block.
type docCommand struct {
	file string
	line int
	args []string // after the program name: the subcommand and its arguments
	text string   // the shell line it came from
}

// docCommands returns the tensorbridge invocations in the shell code
// blocks of a Markdown text: lines joined at trailing backslashes, a
// leading "$ " prompt dropped, and each simple command of a list or pipe
// (; && || | &) taken alone, past env-var assignments and redirections.
func docCommands(file, text string) []docCommand {
	var out []docCommand
	lines := mdLines(text)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !l.fenced || !shellLangs[l.lang] {
			continue
		}
		start, s := l.no, l.text
		for strings.HasSuffix(s, "\\") && i+1 < len(lines) && lines[i+1].fenced {
			i++
			s = strings.TrimSuffix(s, "\\") + " " + lines[i].text
		}
		s = strings.TrimSpace(s)
		s = strings.TrimPrefix(s, "$ ")
		for _, words := range simpleCommands(shellWords(s)) {
			if args, ok := tensorbridgeArgs(words); ok {
				out = append(out, docCommand{file: file, line: start, args: args, text: s})
			}
		}
	}
	return out
}

// Shell operator tokens, as shellWords returns them (words never start
// with a NUL).
const (
	opSep   = "\x00sep"   // ; && || | & ( ) and the keywords that start a command
	opRedir = "\x00redir" // > >> < 2> 2>&1 ...: the next word is its target
)

// shellWords splits a shell line into words (quotes removed, $(...) kept
// whole) and operator tokens; a # at the start of a word ends the line.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			flush()
			return words
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			inWord = true
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			depth := 0
			for ; i < len(s); i++ {
				w.WriteByte(s[i])
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			inWord = true
		case c == ';' || c == '|' || c == '&' || c == '(' || c == ')':
			flush()
			if c == '&' && i+1 < len(s) && s[i+1] == '>' { // &> file
				words = append(words, opRedir)
				i++
				continue
			}
			if (c == '&' || c == '|') && i+1 < len(s) && s[i+1] == c {
				i++
			}
			words = append(words, opSep)
		case c == '>' || c == '<':
			if inWord && strings.Trim(w.String(), "0123456789") == "" {
				w.Reset() // 2>: the descriptor belongs to the redirection
				inWord = false
			}
			flush()
			for i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '&') {
				i++
			}
			words = append(words, opRedir)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words
}

// simpleCommands splits shell words at operators and drops redirections.
func simpleCommands(words []string) [][]string {
	var out [][]string
	var cur []string
	for i := 0; i < len(words); i++ {
		switch words[i] {
		case opSep:
			out, cur = append(out, cur), nil
		case opRedir:
			i++ // its target
		default:
			cur = append(cur, words[i])
		}
	}
	return append(out, cur)
}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// commandPrefixes may stand before a command without being it.
var commandPrefixes = map[string]bool{"do": true, "then": true, "else": true, "time": true, "exec": true, "env": true, "nohup": true, "sudo": true, "!": true}

// tensorbridgeArgs returns the arguments of a simple command that runs
// tensorbridge (by name, by path, or through go run).
func tensorbridgeArgs(words []string) ([]string, bool) {
	for len(words) > 0 && (commandPrefixes[words[0]] || envAssign.MatchString(words[0])) {
		words = words[1:]
	}
	switch {
	case len(words) > 0 && (words[0] == "tensorbridge" || strings.HasSuffix(words[0], "/tensorbridge")):
		return words[1:], true
	case len(words) > 2 && words[0] == "go" && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/tensorbridge":
		return words[3:], true
	}
	return nil, false
}

// invalidPlaceholder is the flag package's message for a value a flag
// does not take; an upper-case placeholder (N, DIR) is let through.
var invalidPlaceholder = regexp.MustCompile(`^invalid value "([A-Z][A-Z0-9_]*)" for flag -([a-z0-9-]+)`)

// TestDocsCommands: every `tensorbridge SUBCOMMAND ...` line in a code
// block of the README or docs/ names a command that exists, and its flags
// parse with that command's flag definitions (commandFlags: the command is
// not run). Placeholders (MODEL, DIR) are fine where a flag takes any
// string; an upper-case placeholder for a number or a duration is let
// through too.
func TestDocsCommands(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		for _, c := range docCommands(file, readDoc(t, file)) {
			checked++
			if err := checkDocCommand(c.args); err != nil {
				t.Errorf("%s:%d: `tensorbridge %s`: %v\n\tin: %s", c.file, c.line, strings.Join(c.args, " "), err, c.text)
			}
		}
	}
	t.Logf("checked %d command lines", checked)
	if checked < 20 {
		t.Errorf("found only %d tensorbridge command lines in code blocks: the parser is broken", checked)
	}
}

// checkDocCommand checks one command line (after the program name).
func checkDocCommand(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("no subcommand")
	}
	name, rest := args[0], append([]string{}, args[1:]...)
	known := false
	for _, c := range commands {
		known = known || c.name == name
	}
	if !known {
		return fmt.Errorf("no such command %q (tensorbridge -h lists them)", name)
	}
	for range 16 { // each pass lets one placeholder through
		fs, err := commandFlags(name, rest)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		if err != nil {
			m := invalidPlaceholder.FindStringSubmatch(err.Error())
			if m == nil || fs == nil || fs.Lookup(m[2]) == nil {
				return err
			}
			if !replaceValue(rest, m[2], m[1], fs.Lookup(m[2]).DefValue) {
				return err
			}
			continue
		}
		if fs == nil || containsWord(rest, "--") {
			return nil
		}
		for _, a := range fs.Args() {
			if len(a) > 1 && strings.HasPrefix(a, "-") {
				return fmt.Errorf("%s comes after a positional argument, where this command no longer parses flags", a)
			}
		}
		return nil
	}
	return errors.New("too many placeholders")
}

// replaceValue puts def for the value placeholder of flag name in args.
func replaceValue(args []string, name, placeholder, def string) bool {
	for i, a := range args {
		flagName := strings.TrimLeft(a, "-")
		switch {
		case flagName == name && i+1 < len(args) && args[i+1] == placeholder:
			args[i+1] = def
			return true
		case flagName == name+"="+placeholder:
			args[i] = "--" + name + "=" + def
			return true
		}
	}
	return false
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

var (
	linkRE     = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkRE  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	schemeRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	headingRE  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlTagRE  = regexp.MustCompile(`<[^>]+>`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// TestDocsLinks: every relative link of the README and docs/ ([x](path),
// [x](path#anchor), [x](#anchor) and [x]: path definitions, outside code)
// names a file or directory that exists, and an anchor into a Markdown
// file names one of its headings (GitHub's slugs).
func TestDocsLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // by path from the repository root
	checked := 0
	for _, file := range docFiles(t) {
		for _, l := range mdLines(readDoc(t, file)) {
			if l.fenced || l.fence {
				continue
			}
			text := codeSpanRE.ReplaceAllString(l.text, "")
			var targets []string
			for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
			if m := refLinkRE.FindStringSubmatch(text); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if target == "" || schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
					continue
				}
				checked++
				if err := checkLink(file, target, anchors); err != nil {
					t.Errorf("%s:%d: link %q: %v", file, l.no, target, err)
				}
			}
		}
	}
	t.Logf("checked %d relative links", checked)
	if checked < 20 {
		t.Errorf("found only %d relative links: the parser is broken", checked)
	}
}

// checkLink checks one relative link target of file (both relative to the
// repository's root); anchors caches the headings of files read.
func checkLink(file, target string, anchors map[string]map[string]bool) error {
	p, anchor, _ := strings.Cut(target, "#")
	dest := file
	if p != "" {
		dest = path.Join(path.Dir(file), p)
		if strings.HasPrefix(dest, "../") {
			return errors.New("points outside the repository")
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(dest))); err != nil {
			return fmt.Errorf("no such file or directory %s", dest)
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return nil
	}
	if anchors[dest] == nil {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(dest)))
		if err != nil {
			return err
		}
		anchors[dest] = headingSlugs(string(b))
	}
	if !anchors[dest][anchor] {
		return fmt.Errorf("%s has no heading with anchor #%s", dest, anchor)
	}
	return nil
}

// headingSlugs returns the anchors GitHub gives the ATX headings of a
// Markdown text: the heading's text lower-cased, with everything but
// letters, digits, marks, spaces, hyphens and underscores removed and
// spaces turned into hyphens; a repeated slug gets -1, -2, ...
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range mdLines(text) {
		if l.fenced || l.fence {
			continue
		}
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		h := inlineLink.ReplaceAllString(m[2], "$1")
		h = htmlTagRE.ReplaceAllString(h, "")
		h = strings.NewReplacer("`", "", "*", "").Replace(h)
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			slugs[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			slugs[slug] = true
		}
		seen[slug]++
	}
	return slugs
}
