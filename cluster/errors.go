package cluster

import (
	"errors"
	"fmt"
)

// Sentinels. Every error this package returns for one of these situations
// matches exactly one of them with errors.Is; the typed errors below carry
// the details (errors.As).
var (
	// ErrWorkerMissing: a process did not join, or did not reach a barrier,
	// within the cluster timeout.
	ErrWorkerMissing = errors.New("cluster: a process did not arrive in time")
	// ErrWorkerLost: a process's session ended without an orderly Leave, or
	// its heartbeats stopped for longer than the cluster timeout.
	ErrWorkerLost = errors.New("cluster: a process was lost")
	// ErrWorkerRefused: this process's join was refused: a wrong cluster
	// token, another job id or process count, an index out of range or
	// already taken. The refusal goes to the joining process alone; the job
	// goes on (and reports the process missing if it never joins).
	ErrWorkerRefused = errors.New("cluster: a process was refused")
	// ErrCoordinatorLost: the coordinator (process 0's service) could not be
	// reached within the cluster timeout, or its session ended.
	ErrCoordinatorLost = errors.New("cluster: the coordinator was lost")
	// ErrNotFound: TryGet of a key nobody has put.
	ErrNotFound = errors.New("cluster: key not found")
	// ErrKeyTimeout: Get of a key nobody put within the timeout.
	ErrKeyTimeout = errors.New("cluster: key not put in time")
	// ErrKeyExists: Put of a key that already holds a different value.
	ErrKeyExists = errors.New("cluster: key already holds another value")
	// ErrKeyLimit: Put beyond the coordinator's limits (Limits: key or value
	// size, keys or bytes per process).
	ErrKeyLimit = errors.New("cluster: key-value store limit reached")
	// ErrConfig: the bootstrap values are missing or contradict each other.
	ErrConfig = errors.New("cluster: invalid bootstrap configuration")
	// ErrClosed: the client or server was already shut down.
	ErrClosed = errors.New("cluster: closed")
)

// FailureKind says what a failed process did wrong.
type FailureKind int

// Failure kinds; each matches one sentinel.
const (
	Missing FailureKind = iota + 1 // ErrWorkerMissing
	Lost                           // ErrWorkerLost
	Refused                        // ErrWorkerRefused
)

func (k FailureKind) String() string {
	switch k {
	case Missing:
		return "missing"
	case Lost:
		return "lost"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("FailureKind(%d)", int(k))
}

func (k FailureKind) sentinel() error {
	switch k {
	case Missing:
		return ErrWorkerMissing
	case Lost:
		return ErrWorkerLost
	case Refused:
		return ErrWorkerRefused
	}
	return nil
}

// WorkerError is the failure of the job because of one process. Every
// process of the job gets the same one: the coordinator decides it once and
// hands it to all.
type WorkerError struct {
	Kind FailureKind
	// Index is the process at fault; Host its host name as it joined
	// ("" when it never joined: then the bootstrap's host list names it).
	Index int
	Host  string
	// Reason says what was observed, e.g. "did not join within 5s" or
	// "session ended without leave (process exited or connection lost)".
	Reason string
	// Barrier is the barrier the job was waiting in, if any.
	Barrier string
}

func (e *WorkerError) Error() string {
	who := fmt.Sprintf("process %d", e.Index)
	if e.Host != "" {
		who += " (" + e.Host + ")"
	}
	s := fmt.Sprintf("cluster: %s %s: %s", who, e.Kind, e.Reason)
	if e.Barrier != "" {
		s += " [barrier " + e.Barrier + "]"
	}
	return s
}

// Is matches the sentinel of the error's kind.
func (e *WorkerError) Is(target error) bool { return target != nil && target == e.Kind.sentinel() }

// CoordinatorError is the loss of the coordinator, as a worker sees it.
type CoordinatorError struct {
	Address string
	Reason  string
	Err     error // the transport's error, if any
}

func (e *CoordinatorError) Error() string {
	s := "cluster: coordinator " + e.Address + " lost: " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches ErrCoordinatorLost.
func (e *CoordinatorError) Is(target error) bool { return target == ErrCoordinatorLost }

// Unwrap returns the transport's error.
func (e *CoordinatorError) Unwrap() error { return e.Err }

// KeyError is a key-value failure: the key and which of ErrNotFound,
// ErrKeyTimeout or ErrKeyExists.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: %q", e.Err, e.Key) }
func (e *KeyError) Unwrap() error { return e.Err }

// NotFound reports whether the key was absent (a TryGet); the PJRT
// key-value callbacks map it to NOT_FOUND.
func (e *KeyError) NotFound() bool { return e.Err == ErrNotFound }

// Timeout reports whether a Get waited in vain; the PJRT key-value
// callbacks map it to DEADLINE_EXCEEDED.
func (e *KeyError) Timeout() bool { return e.Err == ErrKeyTimeout }

// ConfigError is a bootstrap value that is missing, malformed or
// contradicted; Source names where the bad value came from.
type ConfigError struct {
	Field  string
	Value  string
	Source string
	Reason string
}

func (e *ConfigError) Error() string {
	s := "cluster: " + e.Field
	if e.Value != "" {
		s += fmt.Sprintf(" %q", e.Value)
	}
	if e.Source != "" {
		s += " (from " + e.Source + ")"
	}
	return s + ": " + e.Reason
}

// Is matches ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }
