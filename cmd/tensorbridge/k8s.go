package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tensorbridge/tensorbridge/k8s"
)

func init() {
	register(command{name: "k8s", summary: "print Kubernetes manifests: a JobSet for TPU slices on GKE, a Deployment for serving replicas", run: runK8s})
}

func runK8s(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "jobset" && args[0] != "deployment") {
		return usageErr("want `k8s jobset` or `k8s deployment`; see tensorbridge k8s jobset -h")
	}
	kind := args[0]
	synopsis := "--slice v5e-16 [--slices N] --image IMG --name NAME [--namespace NS] [--cluster-timeout D] [--token-secret S] [--max-restarts N] [--host-network] [--pvc CLAIM:/path] -- ARGS..."
	if kind == "deployment" {
		synopsis = "(--slice v5e-4 | --gpus N [--gpu-type T]) [--replicas R] --image IMG --name NAME [--namespace NS] -- ARGS..."
	}
	fs := newFlags("k8s "+kind, stderr, synopsis)
	var o k8s.Options
	fs.StringVar(&o.Name, "name", "", "name of the "+kind+" (prefixes the pods' host names)")
	fs.StringVar(&o.Namespace, "namespace", "", "namespace written into the manifest")
	fs.StringVar(&o.Image, "image", "", "container image whose entrypoint is tensorbridge (see Dockerfile)")
	fs.StringVar(&o.Slice, "slice", "", "TPU accelerator type, e.g. v5e-16, v5litepod-16, v5p-16, v6e-8")
	if kind == "jobset" {
		fs.IntVar(&o.Slices, "slices", 1, "number of slices (multislice: one Job per slice, one slice per node pool)")
		fs.StringVar(&o.Timeout, "cluster-timeout", "", "TENSORBRIDGE_CLUSTER_TIMEOUT for the pods (default: tensorbridge's)")
		fs.StringVar(&o.TokenSecret, "token-secret", "", "Secret holding the job's cluster token under the key \"token\", mounted read-only (default NAME-cluster-token; create it with: kubectl create secret generic NAME-cluster-token --from-literal=token=\"$(openssl rand -hex 32)\")")
		fs.IntVar(&o.MaxRestarts, "max-restarts", 3, "failurePolicy.maxRestarts: how many times the JobSet is recreated after a worker fails")
		fs.BoolVar(&o.HostNetwork, "host-network", false, "run the pods on their nodes' network (multislice traffic); the coordinator still listens on the pod IP only")
		fs.Func("pvc", "mount PersistentVolumeClaim CLAIM read-write at /path in every pod (shared storage for train --checkpoint-dir, so a recreated pod resumes)", func(v string) error {
			claim, path, ok := strings.Cut(v, ":")
			if !ok {
				return fmt.Errorf("%q: want CLAIM:/path", v)
			}
			o.PVC, o.PVCPath = claim, path
			return nil
		})
	} else {
		fs.IntVar(&o.Replicas, "replicas", 1, "number of serving replicas")
		fs.IntVar(&o.GPUs, "gpus", 0, "NVIDIA GPUs per replica (instead of --slice)")
		fs.StringVar(&o.GPUType, "gpu-type", "", "GKE accelerator label value, e.g. nvidia-h100-80gb")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	o.Args = fs.Args()
	// 0 would read as "default" in package k8s: given on the command line
	// it is refused like any other count below 1.
	if kind == "jobset" && o.Slices < 1 {
		return usageErr("--slices %d: want at least 1", o.Slices)
	}
	if kind == "deployment" && o.Replicas < 1 {
		return usageErr("--replicas %d: want at least 1", o.Replicas)
	}
	var obj any
	var err error
	if kind == "jobset" {
		obj, err = k8s.JobSetFor(o)
	} else {
		obj, err = k8s.DeploymentFor(o)
	}
	var ie *k8s.InvalidError
	if errors.As(err, &ie) { // without the package's "k8s:" prefix: the CLI names the command
		return usageErr("%s %q: %s", ie.Option, ie.Value, ie.Reason)
	}
	if err != nil {
		return usageErr("%v", err)
	}
	b, err := k8s.YAML(obj)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
