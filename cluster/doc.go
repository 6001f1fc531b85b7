// Package cluster coordinates the processes of a multi-process job and
// fails the whole job, naming the process at fault, as soon as one is
// missing or lost.
//
// Bootstrap works out who this process is (index, count, coordinator,
// slice) from flags, environment and a TPU VM's metadata; process 0 serves
// the coordination service (Server, gRPC: join, heartbeats, a key-value
// store, barriers, leave) and every process is a Client of it.
//
// The service treats its network as hostile (security.go): a shared token
// (Security.Token) authenticates every call, each process gets a session
// secret at join that its later calls must carry, optional mutual TLS, a
// join that does not fit the job is refused to its caller without failing
// the job, the key-value store is bounded per process (Limits), every
// client-supplied wait is capped and every request message must arrive
// within Limits.ReadTimeout; process 0 refuses to serve where other
// machines reach it with neither token nor mutual TLS unless
// Security.Insecure says to (then it warns). The package reads no secret
// from the environment itself: the caller passes Options.Security (the
// CLI reads --cluster-token-file or $TENSORBRIDGE_CLUSTER_TOKEN_FILE,
// LoadSecurity).
package cluster
