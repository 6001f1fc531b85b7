//go:build linux

package discover_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tensorbridge/tensorbridge/discover"
	"github.com/tensorbridge/tensorbridge/internal/discovertest"
)

// buildFakeNVML compiles testdata/fakenvml/fake_nvml.c into a shared
// library. The C file lays out nvmlPciInfo_t and nvmlMemory_t as the NVML
// API reference does, so the test checks the purego binding's calling
// convention and struct offsets against a C compiler, not against itself.
func buildFakeNVML(t *testing.T, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no C compiler (gcc or cc) on PATH: cannot build the fake NVML library")
		}
	}
	out := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out}, defines...)
	args = append(args, filepath.Join("testdata", "fakenvml", "fake_nvml.c"))
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	return out
}

func TestSystemNVMLFakeLibrary(t *testing.T) {
	lib := buildFakeNVML(t)
	snap, err := discover.SystemNVML{Libraries: []string{lib}}.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	want := &discover.NVMLSnapshot{
		Library:       lib,
		DriverVersion: "545.23.08",
		Devices: []discover.NVMLDevice{
			{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-00000000-0000-4000-8000-000000000000",
				PCIBusID: "00000000:16:00.0", PCIDeviceID: 0x233010DE, PCISubsystemID: 0x16C110DE,
				MemoryTotal: 85520809984, MemoryFree: 85520809984 - 2097152, MemoryUsed: 2097152},
			{Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-00000000-0000-4000-8000-000000000001",
				PCIBusID: "00000000:17:00.0", PCIDeviceID: 0x233010DE, PCISubsystemID: 0x16C110DE,
				Err: "nvmlDeviceGetMemoryInfo: Unknown Error (nvmlReturn_t 999)"},
		},
	}
	if !reflect.DeepEqual(snap, want) {
		t.Errorf("snapshot:\n got %+v\nwant %+v", snap, want)
	}
}

func TestSystemNVMLInitFailure(t *testing.T) {
	lib := buildFakeNVML(t, "-DINIT_FAIL=9")
	_, err := discover.SystemNVML{Libraries: []string{lib}}.Snapshot(context.Background())
	var ne *discover.NVMLError
	if !errors.As(err, &ne) || ne.Op != "nvmlInit_v2" || ne.Code != 9 || ne.Message != "Driver Not Loaded" {
		t.Fatalf("err = %v, want *NVMLError{nvmlInit_v2, 9, Driver Not Loaded}", err)
	}
}

func TestSystemNVMLMissingSymbol(t *testing.T) {
	// A library that is not NVML: dlopen succeeds, the symbols do not.
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not on PATH")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "empty.c")
	if err := os.WriteFile(src, []byte("int not_nvml(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libempty.so")
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	_, err = discover.SystemNVML{Libraries: []string{lib}}.Snapshot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "nvmlInit_v2 or nvmlInit not found") || errors.Is(err, discover.ErrNVMLNotFound) {
		t.Fatalf("err = %v, want a missing-symbol error that is not ErrNVMLNotFound", err)
	}
}

func TestSystemNVMLNotFound(t *testing.T) {
	_, err := discover.SystemNVML{Libraries: []string{filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}}.Snapshot(context.Background())
	if !errors.Is(err, discover.ErrNVMLNotFound) {
		t.Fatalf("err = %v, want ErrNVMLNotFound", err)
	}
}

// The fake library's devices flow into device.Info through Discover.
func TestDiscoverWithFakeNVML(t *testing.T) {
	lib := buildFakeNVML(t)
	f := discovertest.Load(t, "synthetic-nvidia-8xh100")
	opts := f.Options
	opts.NVML = discover.SystemNVML{Libraries: []string{lib}}
	rep, err := discover.Discover(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range rep.Devices {
		got[d.ID] = strings.Join(problemCodes(d.Problems), ",")
	}
	// GPUs 0 and 1 (buses 16, 17) are in the fake library; the second's
	// memory query fails; the other six are on PCI only.
	want := map[string]string{
		"cuda:0000:16:00.0": "",
		"cuda:0000:17:00.0": "nvml-query-failed",
		"cpu:0":             "",
	}
	for _, a := range []string{"40", "41", "96", "97", "c0", "c1"} {
		want["cuda:0000:"+a+":00.0"] = "nvml-device-missing"
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problem codes:\n got %v\nwant %v", got, want)
	}
	if d := rep.DevicesOf("cuda")[0]; d.Memory.Total != 85520809984 || d.Memory.Source != "nvml" {
		t.Errorf("GPU 0 memory %+v, want 85520809984 from nvml", d.Memory)
	}
}
