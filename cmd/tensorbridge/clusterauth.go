package main

import (
	"os"
	"time"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cluster"
)

// clusterAuthFlags are the credentials of a process in a multi-process
// job (the shared token file and, optionally, mutual TLS) and how process
// 0 exposes the coordination service (--cluster-insecure, the connection
// cap and idle timeout). The CLI reads them (the library never reads
// TENSORBRIDGE_CLUSTER_TOKEN_FILE itself) and hands them to the backend or
// the coordination service as a value.
type clusterAuthFlags struct {
	tokenFile, cert, key, ca string
	insecure                 bool
	maxConns                 int
	idle                     time.Duration
}

func addClusterAuthFlags(fs interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
	IntVar(*int, string, int, string)
	DurationVar(*time.Duration, string, time.Duration, string)
}, f *clusterAuthFlags) {
	fs.StringVar(&f.tokenFile, "cluster-token-file", "", "file holding the job's shared secret, sent with every call to the coordination service (default: $"+cluster.EnvTokenFile+")")
	fs.StringVar(&f.cert, "cluster-tls-cert", "", "this process's certificate (PEM) for mutual TLS with the coordination service")
	fs.StringVar(&f.key, "cluster-tls-key", "", "the key of --cluster-tls-cert (PEM)")
	fs.StringVar(&f.ca, "cluster-tls-ca", "", "the CA (PEM) that signs every process's certificate of the job")
	fs.BoolVar(&f.insecure, "cluster-insecure", false, "let process 0 serve the coordination service on an address other machines can reach with neither a token nor mutual TLS (it then logs a warning); without it, it refuses to")
	fs.IntVar(&f.maxConns, "cluster-max-connections", 0, "process 0: connections the coordination service holds open at once, -1 for no cap (default: $"+cluster.EnvMaxConnections+", else 1,024 + 2 per process)")
	fs.DurationVar(&f.idle, "cluster-idle-timeout", 0, "process 0: close a coordination connection with no call open for this long (default: $"+cluster.EnvIdleTimeout+", else a quarter of the cluster timeout, at most 30s)")
}

// security reads the files the flags (or $TENSORBRIDGE_CLUSTER_TOKEN_FILE)
// name and adds the service settings; nil when no flag is given.
func (f *clusterAuthFlags) security() (*cluster.Security, error) {
	token := f.tokenFile
	if token == "" {
		token = os.Getenv(cluster.EnvTokenFile)
	}
	if f.maxConns < -1 {
		return nil, usageErr("--cluster-max-connections %d: want a positive number, or -1 for no cap", f.maxConns)
	}
	if f.idle < 0 {
		return nil, usageErr("--cluster-idle-timeout %s: want a positive duration", f.idle)
	}
	if token == "" && f.cert == "" && f.key == "" && f.ca == "" && !f.insecure && f.maxConns == 0 && f.idle == 0 {
		return nil, nil
	}
	sec, err := cluster.LoadSecurity(token, f.cert, f.key, f.ca)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	sec.Insecure, sec.MaxConnections, sec.IdleTimeout = f.insecure, f.maxConns, f.idle
	return sec, nil
}

// clusterOption is the Open option carrying the credentials settings()
// read.
func (f *settingsFlags) clusterOption() tensorbridge.Option {
	return tensorbridge.WithClusterSecurity(f.clusterSec)
}
