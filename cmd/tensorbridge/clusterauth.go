package main

import (
	"os"

	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/cluster"
)

// clusterAuthFlags are the credentials of a process in a multi-process
// job: the shared token file and, optionally, mutual TLS. The CLI reads
// them (the library never reads TENSORBRIDGE_CLUSTER_TOKEN_FILE itself) and
// hands them to the backend or the coordination service as a value.
type clusterAuthFlags struct {
	tokenFile, cert, key, ca string
}

func addClusterAuthFlags(fs interface {
	StringVar(*string, string, string, string)
}, f *clusterAuthFlags) {
	fs.StringVar(&f.tokenFile, "cluster-token-file", "", "file holding the job's shared secret, sent with every call to the coordination service (default: $"+cluster.EnvTokenFile+")")
	fs.StringVar(&f.cert, "cluster-tls-cert", "", "this process's certificate (PEM) for mutual TLS with the coordination service")
	fs.StringVar(&f.key, "cluster-tls-key", "", "the key of --cluster-tls-cert (PEM)")
	fs.StringVar(&f.ca, "cluster-tls-ca", "", "the CA (PEM) that signs every process's certificate of the job")
}

// security reads the files the flags (or $TENSORBRIDGE_CLUSTER_TOKEN_FILE)
// name; nil when none is given.
func (f *clusterAuthFlags) security() (*cluster.Security, error) {
	token := f.tokenFile
	if token == "" {
		token = os.Getenv(cluster.EnvTokenFile)
	}
	if token == "" && f.cert == "" && f.key == "" && f.ca == "" {
		return nil, nil
	}
	sec, err := cluster.LoadSecurity(token, f.cert, f.key, f.ca)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return sec, nil
}

// clusterOption is the Open option carrying the credentials settings()
// read.
func (f *settingsFlags) clusterOption() tensorbridge.Option {
	return tensorbridge.WithClusterSecurity(f.clusterSec)
}
