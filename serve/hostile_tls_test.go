package serve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tensorbridge/tensorbridge/client"
	"github.com/tensorbridge/tensorbridge/serve"
)

// TestHostileTLS and the certificates it makes.

// TLS with a client CA: a client that does not trust the server's CA, and
// one without a client certificate, fail the handshake; one with both,
// and the token, gets a correct answer over HTTPS and gRPC.
func TestHostileTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	srvCert := newLeaf(t, ca, caKey, "server", true)
	cliCert := newLeaf(t, ca, caKey, "client", false)
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	writePEM(t, certFile, "CERTIFICATE", srvCert.Certificate[0])
	der, err := x509.MarshalECPrivateKey(srvCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", der)
	cfg, err := serve.TLSConfig(certFile, keyFile, filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	tokenPath := filepath.Join(dir, "token")
	writeToken(t, tokenPath, "tls-token")
	b := openBackend(t, batchBuckets(t, "batch=1,2,4,8"))
	ts := startWith(t, b, serve.Options{Logger: quietLogger(t), Limits: hostileLimits, TLS: cfg, AuthTokenFile: tokenPath})
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	ref := loadReference(t, "mlp", 1, 1)
	good, want := ref.batch(0, 2)
	ctx := context.Background()

	for name, tc := range map[string]*tls.Config{
		"no CA":          {MinVersion: tls.VersionTLS12},
		"no client cert": {RootCAs: roots, ServerName: "127.0.0.1"},
	} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
		_, err := client.NewHTTP("https://"+ts.httpAddr, hc).WithToken("tls-token").Infer(ctx, "mlp", &client.InferRequest{Inputs: good})
		if err == nil {
			t.Fatalf("HTTPS with %s: answered", name)
		}
		g, err := client.DialGRPC(ts.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)), client.BearerToken("tls-token", true))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := g.Infer(cctx, "mlp", &client.InferRequest{Inputs: good}); err == nil {
			t.Fatalf("gRPC with %s: answered", name)
		}
		cancel()
		_ = g.Close()
	}
	tc := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cliCert}}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	h := client.NewHTTP("https://"+ts.httpAddr, hc)
	if _, err := h.Infer(ctx, "mlp", &client.InferRequest{Inputs: good}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("HTTPS without the token: %v, want 401", err)
	}
	res, err := h.WithToken("tls-token").Infer(ctx, "mlp", &client.InferRequest{Inputs: good})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, res, want)
	g, err := client.DialGRPC(ts.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tc)), client.BearerToken("tls-token", true))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	res, err = g.Infer(ctx, "mlp", &client.InferRequest{Inputs: good})
	if err != nil {
		t.Fatal(err)
	}
	checkOutputs(t, res, want)
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, server bool) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
