// Package k8s writes the Kubernetes manifests that run tensorbridge on GKE.
//
// They are a JobSet (jobset.x-k8s.io/v1alpha2) for TPU slices of one or
// more hosts, where every host runs the same program and the slice's
// environment (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, MEGASCALE_*) tells each
// process who it is (package cluster), and a Deployment for stateless
// serving replicas on single-host TPU slices or GPUs.
//
// The objects are typed values: the pod template and the Deployment are
// Kubernetes' own types (k8s.io/api); the few JobSet types are written here
// from JobSet's published API
// (https://github.com/kubernetes-sigs/jobset/blob/main/api/jobset/v1alpha2/jobset_types.go),
// since JobSet's Go module is not one this project can depend on. They are
// serialised to YAML through their JSON field names (sigs.k8s.io/yaml), as
// kubectl does.
package k8s

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JobSet API group and version.
const (
	JobSetAPIVersion = "jobset.x-k8s.io/v1alpha2"
	JobSetKind       = "JobSet"
)

// Annotations and labels JobSet defines.
const (
	// ExclusiveTopologyAnnotation places each job of the JobSet alone on one
	// value of the named node label: with cloud.google.com/gke-nodepool, one
	// slice per node pool (kubernetes-sigs/jobset
	// examples/simple/exclusive-placement.yaml).
	ExclusiveTopologyAnnotation = "alpha.jobset.sigs.k8s.io/exclusive-topology"
	// JobIndexLabel is the index of a pod's job within its replicated job:
	// the slice id of a multislice JobSet.
	JobIndexLabel = "jobset.sigs.k8s.io/job-index"
)

// JobSet is the subset of JobSet's v1alpha2 API that tensorbridge writes.
type JobSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              JobSetSpec `json:"spec,omitempty"`
}

// JobSetSpec is JobSet's spec.
type JobSetSpec struct {
	ReplicatedJobs []ReplicatedJob `json:"replicatedJobs,omitempty"`
	Network        *Network        `json:"network,omitempty"`
	SuccessPolicy  *SuccessPolicy  `json:"successPolicy,omitempty"`
	FailurePolicy  *FailurePolicy  `json:"failurePolicy,omitempty"`
}

// ReplicatedJob is a Job template run Replicas times.
type ReplicatedJob struct {
	Name     string                  `json:"name"`
	Template batchv1.JobTemplateSpec `json:"template"`
	Replicas int32                   `json:"replicas,omitempty"`
}

// Network configures the headless Service JobSet creates for its pods.
type Network struct {
	// EnableDNSHostnames gives each pod the DNS name
	// <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>.
	EnableDNSHostnames *bool `json:"enableDNSHostnames,omitempty"`
	// Subdomain is the Service's name; JobSet defaults it to the JobSet's.
	Subdomain string `json:"subdomain,omitempty"`
	// PublishNotReadyAddresses publishes pod addresses before they are
	// ready, so that workers find each other while they start.
	PublishNotReadyAddresses *bool `json:"publishNotReadyAddresses,omitempty"`
}

// Success policy operators (the CRD's enum).
const (
	OperatorAll = "All"
	OperatorAny = "Any"
)

// SuccessPolicy says when the JobSet has succeeded.
type SuccessPolicy struct {
	Operator             string   `json:"operator"`
	TargetReplicatedJobs []string `json:"targetReplicatedJobs,omitempty"`
}

// FailurePolicy says how often the JobSet is restarted after a job fails.
type FailurePolicy struct {
	MaxRestarts int32 `json:"maxRestarts"`
}
