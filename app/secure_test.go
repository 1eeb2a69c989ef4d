package app_test

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

	"io"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/app"
	"rawwatch/internal/authz"
	"rawwatch/internal/testkit"
)

// Secure serving on the real apiserver. The controller runs as config/rbac's
// ServiceAccount (so its metrics-auth role is shown to suffice) and serves
// /metrics and the live page over HTTPS with a certificate from a directory;
// a ServiceAccount bound to config/rbac's rawwatch-metrics-reader reads
// /metrics and not the page, one bound to rawwatch-page-reader the page and
// not /metrics, another gets 403, no token 401; the probes stay plain and open.
func TestSecureServingLetsInOnlyWhomRBACAllows(t *testing.T) {
	admin, ns := rbacNamespace(t)
	reader := boundToken(t, admin, ns, "prometheus", "rawwatch-metrics-reader")
	nosy := testkit.ServiceAccountToken(t, admin, ns, "nosy")
	viewer := boundToken(t, admin, ns, "viewer", "rawwatch-page-reader")
	a, logs, client := startSecure(t, admin, app.Options{Namespace: ns,
		MetricsAddr: "127.0.0.1:0", HealthAddr: "localhost:0", UIAddr: "127.0.0.1:0"})
	client.Timeout = 10 * time.Second
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

// A grant taken away ends the live page: the viewer's open event stream
// ends after its lifetime, and its browser's reconnect is refused once the
// allowed answer has expired (AllowTTL). Here the lifetime is 3 s and
// AllowTTL 2 s (1 minute and 2 minutes by default); the test waits a minute
// for each, for a busy machine, and reports how long they took.
func TestARevokedViewersStreamEndsAndItsReconnectIsRefused(t *testing.T) {
	admin, ns := rbacNamespace(t)
	viewer := boundToken(t, admin, ns, "viewer", "rawwatch-page-reader")
	a, _, client := startSecure(t, admin, app.Options{Namespace: ns, UIAddr: "127.0.0.1:0",
		Authz: authz.Options{AllowTTL: 2 * time.Second, DenyTTL: time.Second}, StreamLifetime: 3 * time.Second})
	events := "https://" + a.UIAddr() + "/ui/events"

	req, _ := http.NewRequest(http.MethodGet, events, nil)
	req.Header.Set("Authorization", "Bearer "+viewer)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the viewer's stream: %d, want 200", resp.StatusCode)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()

	kube := kubernetes.NewForConfigOrDie(admin)
	if err := kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), "rawwatch-page-reader-"+ns+"-viewer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the stream ended with %v, want its end", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the revoked viewer's stream still runs a minute after its 3 s lifetime")
	}
	t.Logf("the stream ended %v after the grant was taken away", time.Since(revoked).Round(10*time.Millisecond))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		code, _ := testkit.BearerGet(t, client, events, viewer)
		if code == http.StatusForbidden {
			t.Logf("its reconnect was refused %v after the grant was taken away (AllowTTL 2s)", time.Since(revoked).Round(10*time.Millisecond))
			return
		}
		if code != http.StatusOK {
			t.Fatalf("the revoked viewer's reconnect: %d, want 200 until the grant's answer expires, then 403", code)
		}
		if time.Now().After(deadline) {
			t.Fatal("the revoked viewer still streams the page a minute after its grant was taken away (AllowTTL 2s)")
		}
	}
}

// With --auth-token-audiences, the guard takes only tokens made for one of
// the audiences, and the real API server checks it: a granted
// ServiceAccount's token for the audience reads /metrics, its token for
// the API server (what every pod has) is refused, and the token it sends
// the controller is refused by the API server: it cannot be replayed there.
func TestADedicatedAudienceTakesOnlyTokensMadeForIt(t *testing.T) {
	admin, ns := rbacNamespace(t)
	forAPIServer := boundToken(t, admin, ns, "prometheus", "rawwatch-metrics-reader")
	kube := kubernetes.NewForConfigOrDie(admin)
	hour := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "prometheus", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"rawwatch"}, ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forRawwatch := tr.Status.Token
	a, _, client := startSecure(t, admin, app.Options{Namespace: ns, MetricsAddr: "127.0.0.1:0",
		Authz: authz.Options{Audiences: []string{"rawwatch"}}})
	client.Timeout = 10 * time.Second
	metrics := "https://" + a.MetricsAddr() + "/metrics"
	if code, body := testkit.BearerGet(t, client, metrics, forRawwatch); code != http.StatusOK {
		t.Errorf("a granted ServiceAccount's token made for rawwatch: %d %.200q, want 200", code, body)
	}
	if code, body := testkit.BearerGet(t, client, metrics, forAPIServer); code != http.StatusUnauthorized {
		t.Errorf("the same ServiceAccount's token made for the API server: %d %.200q, want 401", code, body)
	}
	replayed := rest.AnonymousClientConfig(admin)
	replayed.BearerToken = forRawwatch
	if _, err := kubernetes.NewForConfigOrDie(replayed).CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("the token made for rawwatch, replayed against the API server: %v, want 401", err)
	}
}

// rbacNamespace runs t in parallel and returns the shared control plane's
// admin config, with config/rbac installed, and a namespace of t's own.
func rbacNamespace(t *testing.T) (*rest.Config, string) {
	cp, ns, _ := testkit.Parallel(t)
	testkit.InstallRBAC(t, cp.Config())
	return cp.Config(), ns
}

// boundToken is a token of ServiceAccount sa of ns, bound to ClusterRole
// role.
func boundToken(t *testing.T, admin *rest.Config, ns, sa, role string) string {
	token := testkit.ServiceAccountToken(t, admin, ns, sa)
	testkit.BindClusterRole(t, admin, role, ns, sa)
	return token
}

// startSecure starts an App with opts, serving securely with a certificate
// from a directory, as config/rbac's ServiceAccount (so its roles are shown
// to suffice), and returns it, its log and an HTTP client trusting it.
func startSecure(t *testing.T, admin *rest.Config, opts app.Options) (*app.App, *testkit.Logs, *http.Client) {
	asController := rest.AnonymousClientConfig(admin)
	asController.BearerToken = testkit.ServiceAccountToken(t, admin, testkit.ControllerNamespace, testkit.ControllerServiceAccount)
	certDir, roots := servingCert(t)
	opts.Config, opts.SecureServing, opts.CertDir = asController, true, certDir
	a, _, logs := startAppWith(t, opts)
	return a, logs, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
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
