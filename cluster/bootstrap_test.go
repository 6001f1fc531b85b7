package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

// bootstrapFixture is one file of testdata/bootstrap (see its README).
type bootstrapFixture struct {
	Synthetic      bool              `json:"synthetic"`
	Description    string            `json:"description"`
	Sources        []string          `json:"sources"`
	Env            map[string]string `json:"env"`
	DMIProductName string            `json:"dmi_product_name"`
	Metadata       map[string]string `json:"metadata"`
	Want           struct {
		ProcessIndex Int       `json:"process_index"`
		ProcessCount Int       `json:"process_count"`
		Coordinator  String    `json:"coordinator"`
		Hosts        []string  `json:"hosts"`
		SliceID      Int       `json:"slice_id"`
		NumSlices    Int       `json:"num_slices"`
		Slice        string    `json:"slice"`
		Timeout      *Duration `json:"timeout"`
	} `json:"want"`
}

// metadataTPU runs package discover against a host whose DMI says GCE and
// whose metadata server (on loopback) answers md: the same path Bootstrap
// takes on a Cloud TPU VM.
func metadataTPU(t *testing.T, env map[string]string, product string, md map[string]string) func(context.Context) (*discover.TPUEnvironment, error) {
	root := t.TempDir()
	if product != "" {
		dir := filepath.Join(root, "sys/class/dmi/id")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "product_name"), []byte(product+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Metadata-Flavor", "Google")
		if r.Header.Get("Metadata-Flavor") != "Google" {
			http.Error(w, "missing Metadata-Flavor", http.StatusForbidden)
			return
		}
		v, ok := md[strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(v))
	}))
	t.Cleanup(srv.Close)
	return func(ctx context.Context) (*discover.TPUEnvironment, error) {
		rep, err := discover.Discover(ctx, discover.Options{
			Root: root, Env: discover.EnvMap(env), Home: root,
			MetadataURL: srv.URL + "/computeMetadata/v1", MetadataTimeout: 5 * time.Second,
			NVML: discovertest.NotFoundNVML, PluginPath: []discover.SearchDir{},
			Credentials: &discover.Credentials{},
		})
		if rep == nil {
			return nil, err
		}
		return &rep.TPU, err
	}
}

func TestBootstrapFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/bootstrap/*.json")
	if err != nil || len(files) < 7 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var fx bootstrapFixture
			if err := json.Unmarshal(b, &fx); err != nil {
				t.Fatal(err)
			}
			if !fx.Synthetic || len(fx.Sources) == 0 {
				t.Fatalf("%s must be labelled synthetic and name its sources", f)
			}
			metadataCalls := 0
			tpu := metadataTPU(t, fx.Env, fx.DMIProductName, fx.Metadata)
			cfg, err := Bootstrap(context.Background(), Options{
				Env: discover.EnvMap(fx.Env), Hostname: "test-host",
				TPU: func(ctx context.Context) (*discover.TPUEnvironment, error) {
					metadataCalls++
					return tpu(ctx)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			w := fx.Want
			check := func(name string, got, want any) {
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %+v, want %+v", name, got, want)
				}
			}
			check("process_index", cfg.ProcessIndex, w.ProcessIndex)
			check("process_count", cfg.ProcessCount, w.ProcessCount)
			check("coordinator", cfg.Coordinator, w.Coordinator)
			check("hosts", cfg.Hosts, w.Hosts)
			check("slice_id", cfg.SliceID, w.SliceID)
			check("num_slices", cfg.NumSlices, w.NumSlices)
			gotSlice := ""
			if cfg.Slice != nil {
				gotSlice = cfg.Slice.Name
			}
			check("slice", gotSlice, w.Slice)
			if w.Timeout != nil {
				check("timeout", cfg.Timeout, *w.Timeout)
			}
			// The metadata server is asked only when nothing else placed the process.
			if fx.Env["TPU_WORKER_ID"] != "" && metadataCalls > 0 {
				t.Errorf("metadata consulted %d times with TPU_WORKER_ID set", metadataCalls)
			}
			if len(fx.Metadata) > 0 && metadataCalls == 0 {
				t.Errorf("metadata not consulted")
			}
		})
	}
}

func TestBootstrapFlagsWinOverEnv(t *testing.T) {
	id, n := 1, 2
	cfg, err := Bootstrap(context.Background(), Options{
		Coordinator: "127.0.0.1:7000", ProcessID: &id, NumProcesses: &n, Timeout: 3 * time.Second,
		Env: discover.EnvMap(map[string]string{EnvProcessID: "0", EnvNumProcesses: "4", EnvCoordinator: "10.0.0.1", "TPU_WORKER_ID": "3", "TPU_WORKER_HOSTNAMES": "a,b,c,d"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []any{Int{1, SourceFlag}, Int{2, SourceFlag}, String{"127.0.0.1:7000", SourceFlag}, Duration{3 * time.Second, SourceFlag}}
	got := []any{cfg.ProcessIndex, cfg.ProcessCount, cfg.Coordinator, cfg.Timeout}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestBootstrapErrors(t *testing.T) {
	noTPU := func(context.Context) (*discover.TPUEnvironment, error) { return &discover.TPUEnvironment{}, nil }
	cases := []struct {
		name  string
		env   map[string]string
		field string
	}{
		{"worker id beyond the list", map[string]string{"TPU_WORKER_ID": "4", "TPU_WORKER_HOSTNAMES": "a,b,c,d"}, "worker id"},
		{"worker id not a number", map[string]string{"TPU_WORKER_ID": "two"}, "worker id"},
		{"index beyond count", map[string]string{EnvProcessID: "4", EnvNumProcesses: "4", EnvCoordinator: "h"}, "process index"},
		{"no coordinator", map[string]string{EnvProcessID: "1", EnvNumProcesses: "4"}, "coordinator"},
		{"bad timeout", map[string]string{EnvTimeout: "ten seconds"}, "cluster timeout"},
		{"zero timeout", map[string]string{EnvTimeout: "0s"}, "cluster timeout"},
		{"slice id beyond slices", map[string]string{"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "2"}, "slice id"},
		{"multislice without a worker list", map[string]string{"TPU_WORKER_ID": "0", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1"}, "process index"},
		{"count not a number", map[string]string{EnvNumProcesses: "many"}, "process count"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Bootstrap(context.Background(), Options{Env: discover.EnvMap(c.env), TPU: noTPU})
			var ce *ConfigError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("got %v, want a ConfigError on %q", err, c.field)
			}
			t.Log(err)
		})
	}
}

// FuzzBootstrap: any environment gives a valid configuration or a
// *ConfigError, never a panic, and a valid one has its index in range.
func FuzzBootstrap(f *testing.F) {
	f.Add("2", "a,b,c,d", "", "", "", "", "")
	f.Add("3", "h-0.h,h-1.h,h-2.h,h-3.h", "2", "1", "h-0.h:8080", "", "")
	f.Add("", "", "", "", "", "10.0.0.1:99", "5")
	f.Add("-1", ",,,", "0", "0", "[::1]", "x", "y")
	f.Fuzz(func(t *testing.T, worker, hosts, slices, slice, mega, coord, pid string) {
		env := map[string]string{"TPU_WORKER_ID": worker, "TPU_WORKER_HOSTNAMES": hosts, "MEGASCALE_NUM_SLICES": slices,
			"MEGASCALE_SLICE_ID": slice, "MEGASCALE_COORDINATOR_ADDRESS": mega, EnvCoordinator: coord, EnvProcessID: pid, "TPU_SKIP_MDS_QUERY": "1"}
		cfg, err := Bootstrap(context.Background(), Options{Env: discover.EnvMap(env), Hostname: "h"})
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if cfg.ProcessIndex.Value < 0 || cfg.ProcessIndex.Value >= cfg.ProcessCount.Value || cfg.ProcessIndex.Source == "" {
			t.Fatalf("index %+v of %+v", cfg.ProcessIndex, cfg.ProcessCount)
		}
		if cfg.ProcessCount.Value > 1 && cfg.Coordinator.Value == "" {
			t.Fatal("several processes and no coordinator")
		}
	})
}
