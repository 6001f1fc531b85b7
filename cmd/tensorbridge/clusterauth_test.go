package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

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

// The coordination service's flags reach the Security the backend and
// doctor hand to the service: --cluster-insecure, --cluster-max-connections
// and --cluster-idle-timeout (each unset by default, so that
// $TENSORBRIDGE_CLUSTER_MAX_CONNECTIONS and $TENSORBRIDGE_CLUSTER_IDLE_TIMEOUT
// stand, Bootstrap reading them); bad values are usage errors naming the
// flag.
func TestClusterServiceFlags(t *testing.T) {
	t.Setenv(cluster.EnvTokenFile, "")
	for _, c := range []struct {
		args    []string
		want    *cluster.Security
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"--cluster-insecure"}, &cluster.Security{Insecure: true}, ""},
		{[]string{"--cluster-max-connections", "300", "--cluster-idle-timeout", "5s"}, &cluster.Security{MaxConnections: 300, IdleTimeout: 5 * time.Second}, ""},
		{[]string{"--cluster-max-connections", "-1"}, &cluster.Security{MaxConnections: -1}, ""},
		{[]string{"--cluster-max-connections", "-2"}, nil, "--cluster-max-connections"},
		{[]string{"--cluster-idle-timeout", "-1s"}, nil, "--cluster-idle-timeout"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var f clusterAuthFlags
		addClusterAuthFlags(fs, &f)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		sec, err := f.security()
		if c.wantErr != "" {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: %v, want a usage error naming %s", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(sec, c.want) {
			t.Errorf("%v: %s (%v), want %s", c.args, serviceSettings(sec), err, serviceSettings(c.want))
		}
	}
}

func serviceSettings(s *cluster.Security) string {
	if s == nil {
		return "nil"
	}
	return fmt.Sprintf("insecure %v, max connections %d, idle timeout %s", s.Insecure, s.MaxConnections, s.IdleTimeout)
}

// doctor --cluster as process 0 of a job whose coordinator address other
// machines reach refuses, without a token, to serve the coordination
// service, naming --cluster-insecure; with it, it serves (and here waits
// in vain for process 1, which is a timeout, not a refusal).
func TestDoctorClusterInsecure(t *testing.T) {
	t.Setenv(cluster.EnvTokenFile, "")
	_, port, _ := net.SplitHostPort(loopbackAddr(t))
	base := []string{"--cluster", "--no-metadata", "--coordinator", "tb-unresolvable.invalid:" + port, "--process-id", "0", "--num-processes", "2", "--cluster-timeout", "300ms"}
	err := runDoctor(context.Background(), base, &bytes.Buffer{}, io.Discard)
	if !errors.Is(err, cluster.ErrConfig) || !strings.Contains(err.Error(), "--cluster-insecure") {
		t.Fatalf("without a token: %v, want the exposure config error", err)
	}
	err = runDoctor(context.Background(), append(base, "--cluster-insecure"), &bytes.Buffer{}, io.Discard)
	if err == nil || errors.Is(err, cluster.ErrConfig) {
		t.Fatalf("with --cluster-insecure: %v, want the join to time out", err)
	}
}
