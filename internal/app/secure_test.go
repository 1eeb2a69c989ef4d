package app_test

import (
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

	"k8s.io/client-go/rest"

	"rawwatch/internal/app"
	"rawwatch/internal/testkit"
)

// Secure serving on the real apiserver. The controller runs as config/rbac's
// ServiceAccount (so its metrics-auth role is shown to suffice) and serves
// /metrics and the live page over HTTPS with a certificate from a directory;
// a ServiceAccount bound to config/rbac's rawwatch-metrics-reader reads
// /metrics and not the page, one bound to rawwatch-page-reader the page and
// not /metrics, another gets 403, no token 401; the probes stay plain and open.
func TestSecureServingLetsInOnlyWhomRBACAllows(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	testkit.InstallRBAC(t, cp.Config())
	reader := testkit.ServiceAccountToken(t, cp.Config(), ns, "prometheus")
	nosy := testkit.ServiceAccountToken(t, cp.Config(), ns, "nosy")
	testkit.BindClusterRole(t, cp.Config(), "rawwatch-metrics-reader", ns, "prometheus")
	viewer := testkit.ServiceAccountToken(t, cp.Config(), ns, "viewer")
	testkit.BindClusterRole(t, cp.Config(), "rawwatch-page-reader", ns, "viewer")

	asController := rest.AnonymousClientConfig(cp.Config())
	asController.BearerToken = testkit.ServiceAccountToken(t, cp.Config(), testkit.ControllerNamespace, testkit.ControllerServiceAccount)
	certDir, roots := servingCert(t)
	a, _, logs := startAppWith(t, app.Options{Config: asController, Namespace: ns,
		SecureServing: true, CertDir: certDir,
		MetricsAddr: "127.0.0.1:0", HealthAddr: "localhost:0", UIAddr: "127.0.0.1:0"})

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	get := func(url, token string) (int, string) { return testkit.BearerGet(t, client, url, token) }
	metrics := "https://" + a.MetricsAddr() + "/metrics"
	page := "https://" + a.UIAddr() + "/ui/"
	for _, c := range []struct {
		url, who, token string
		want            int
		body            string
	}{
		{metrics, "no token", "", http.StatusUnauthorized, "Unauthorized"},
		{metrics, "a made-up token", "not-a-token", http.StatusUnauthorized, "Unauthorized"},
		{metrics + "/x", "a ServiceAccount with the role, on a path not served", reader, http.StatusNotFound, ""},
		{metrics, "a ServiceAccount without the role", nosy, http.StatusForbidden, `"system:serviceaccount:` + ns + `:nosy" may not get /metrics`},
		{metrics, "a ServiceAccount with the role", reader, http.StatusOK, "rawwatch_resource_version"},
		{metrics, "a ServiceAccount with the page's role", viewer, http.StatusForbidden, "may not get /metrics"},
		{page, "no token", "", http.StatusUnauthorized, ""},
		{page, "a ServiceAccount without the role", nosy, http.StatusForbidden, ""},
		{page, "a ServiceAccount with the metrics' role", reader, http.StatusForbidden, ""},
		{page, "a ServiceAccount with the role", viewer, http.StatusOK, "rawwatch"},
		{page + "events", "a ServiceAccount with the role", viewer, http.StatusOK, "text/event-stream"},
	} {
		code, body := get(c.url, c.token)
		if code != c.want || !strings.Contains(body, c.body) {
			t.Errorf("GET %s with %s: %d %.200q, want %d with %q", c.url, c.who, code, body, c.want, c.body)
		}
	}
	// The kubelet's probes need no token, over plain HTTP.
	if code, body := testkit.HTTPGet("http://" + a.HealthAddr() + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q, want 200 with no token", code, body)
	}
	// Plain HTTP to the secured port is not served.
	if code, body := testkit.HTTPGet("http://" + a.MetricsAddr() + "/metrics"); code == http.StatusOK {
		t.Errorf("plain HTTP to the secured metrics port: %d %.100q", code, body)
	}
	if n := logs.Count("forbidden"); n > 0 {
		t.Errorf("the controller's own requests were forbidden %d times: config/rbac lacks a permission:\n%s",
			n, strings.Join(logs.Grep("forbidden"), "\n"))
	}
}

// servingCert writes a CA and a serving certificate for 127.0.0.1 signed by
// it into a directory as tls.crt and tls.key, and returns the directory and
// the CA to trust.
func servingCert(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rawwatch"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return dir, pool
}
