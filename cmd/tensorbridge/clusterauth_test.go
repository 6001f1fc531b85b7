package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tensorbridge/tensorbridge/cluster"
)

// TestDoctorClusterToken: doctor --cluster reads the job's token from
// --cluster-token-file or, without the flag, from the file
// $TENSORBRIDGE_CLUSTER_TOKEN_FILE names. Two workers with the same token
// form the job; a worker with another token is refused (ErrWorkerRefused)
// and the other then reports it missing. (Injected fault: security()
// ignoring the flag; both workers then take the environment's token and
// the second case forms the job instead of refusing worker 1.)
func TestDoctorClusterToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "job-secret\n")
	bad := write("bad", "not-the-job-secret")
	t.Setenv(cluster.EnvTokenFile, good)
	cases := []struct {
		name       string
		flags      [2][]string // extra flags of worker 0 and 1
		timeout    string
		wantRefuse bool
	}{
		{"token from the flag", [2][]string{{"--cluster-token-file", good}, {"--cluster-token-file", good}}, "20s", false},
		{"token from the environment", [2][]string{nil, nil}, "20s", false},
		{"worker 1 with another token", [2][]string{nil, {"--cluster-token-file", bad}}, "1s", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			addr := loopbackAddr(t)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					args := append([]string{"--cluster", "--json", "--no-metadata", "--coordinator", addr,
						"--process-id", fmt.Sprint(i), "--num-processes", "2", "--cluster-timeout", c.timeout}, c.flags[i]...)
					errs[i] = runDoctor(context.Background(), args, &bytes.Buffer{}, io.Discard)
				}()
			}
			wg.Wait()
			if !c.wantRefuse {
				for i, err := range errs {
					if err != nil {
						t.Errorf("worker %d: %v", i, err)
					}
				}
				return
			}
			if !errors.Is(errs[1], cluster.ErrWorkerRefused) {
				t.Errorf("worker 1 with another token: %v, want refused", errs[1])
			}
			var we *cluster.WorkerError
			if !errors.Is(errs[0], cluster.ErrWorkerMissing) || !errors.As(errs[0], &we) || we.Index != 1 {
				t.Errorf("worker 0: %v, want process 1 missing", errs[0])
			}
		})
	}
	// A bad token file is a usage error naming the file.
	err := runDoctor(context.Background(), []string{"--cluster", "--no-metadata", "--cluster-token-file", filepath.Join(dir, "absent")}, &bytes.Buffer{}, io.Discard)
	if !errors.Is(err, cluster.ErrConfig) && (err == nil || !bytes.Contains([]byte(err.Error()), []byte("absent"))) {
		t.Errorf("absent token file: %v", err)
	}
}
