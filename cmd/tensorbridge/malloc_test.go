package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

func TestWantMallocReexec(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		cmd  string
		want bool
	}{
		{"clean environment", nil, "run", true},
		{"no command", nil, "", true},
		{"already re-executed", map[string]string{envMallocSet: "1"}, "run", false},
		{"user's tunables win", map[string]string{"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}, "run", false},
		{"opted out", map[string]string{"TENSORBRIDGE_MALLOC": "system"}, "bench", false},
		{"opted out, any case", map[string]string{"TENSORBRIDGE_MALLOC": "System"}, "run", false},
		{"serve keeps glibc's defaults", nil, "serve", false},
		{"serve opted in", map[string]string{"TENSORBRIDGE_MALLOC": "tuned"}, "serve", true},
		{"other value", map[string]string{"TENSORBRIDGE_MALLOC": "other"}, "run", true},
	}
	for _, c := range cases {
		args := []string{"tensorbridge"}
		if c.cmd != "" {
			args = append(args, c.cmd)
		}
		if got := wantMallocReexec(func(k string) string { return c.env[k] }, args); got != c.want {
			t.Errorf("%s: wantMallocReexec = %v, want %v", c.name, got, c.want)
		}
	}
}

// envMallocChild makes this test binary act as a program's main: re-execute
// with the tunables, then print what it runs with.
const envMallocChild = "TENSORBRIDGE_TEST_MALLOC_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envMallocChild) == "1" {
		reexecWithMallocTunables()
		for _, kv := range foreignEnv() {
			if strings.HasPrefix(kv, "GLIBC_TUNABLES="+mallocTunables) || strings.HasPrefix(kv, envMallocSet+"=") {
				os.Stdout.WriteString("foreignEnv kept " + kv + "\n")
			}
		}
		os.Stdout.WriteString(os.Getenv("GLIBC_TUNABLES") + "\n" + mallocSetting() + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMallocReexec runs this binary as a child that re-executes itself:
// the re-executed process must carry the tunables and report them (and
// leave them out of the environment it gives pip), and a child with
// GLIBC_TUNABLES of its own must keep them.
func TestMallocReexec(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("glibc tunables are Linux's")
	}
	run := func(extra ...string) []string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		env := []string{envMallocChild + "=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GLIBC_TUNABLES=") && !strings.HasPrefix(kv, envMallocSet+"=") && !strings.HasPrefix(kv, "TENSORBRIDGE_MALLOC=") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, extra...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("child printed %q, want two lines", out)
		}
		return lines
	}
	if got := run(); got[0] != mallocTunables || !strings.Contains(got[1], "set by tensorbridge") {
		t.Errorf("re-executed child runs with %q, reports %q", got[0], got[1])
	}
	if got := run("GLIBC_TUNABLES=glibc.malloc.arena_max=4"); got[0] != "glibc.malloc.arena_max=4" || !strings.Contains(got[1], "from the environment") {
		t.Errorf("child with its own tunables runs with %q, reports %q", got[0], got[1])
	}
	if got := run("TENSORBRIDGE_MALLOC=system"); got[0] != "" || got[1] != "the C library's defaults" {
		t.Errorf("opted-out child runs with %q, reports %q", got[0], got[1])
	}
}
