package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile/myresource"
)

// rbacManifests are the controller's Namespace and least-privilege RBAC, as
// config/ has them.
func rbacManifests(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "config", "rbac", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC manifests: %v", err)
	}
	out := []string{filepath.Join(root, "config", "default", "namespace.yaml")}
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			out = append(out, f)
		}
	}
	return out
}

// The in-cluster path for real: no kubeconfig anywhere; a ServiceAccount token
// from the TokenRequest API, the cluster CA and the namespace written where a
// kubelet would mount them (a temp dir, given as --serviceaccount-dir), and
// KUBERNETES_SERVICE_HOST/PORT pointing at the apiserver. With only config/'s
// RBAC granted, the controller authenticates as the ServiceAccount, takes the
// leader Lease in its own namespace, reconciles, records Events, and on
// SIGTERM releases the Lease.
func TestInClusterWithAServiceAccountToken(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	if err := controlplane.Apply(ctx, cp.Config(), rbacManifests(t)...); err != nil {
		t.Fatal(err)
	}
	token := testkit.ServiceAccountToken(t, cp.Config(), "rawwatch-system", "rawwatch")
	caPEM, err := os.ReadFile(cp.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	sa := t.TempDir()
	for name, data := range map[string]string{"token": token, "ca.crt": string(caPEM), "namespace": "rawwatch-system"} {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	server, err := url.Parse(cp.APIServer.URL)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"KUBERNETES_SERVICE_HOST=" + server.Hostname(), "KUBERNETES_SERVICE_PORT=" + server.Port(),
		"KUBECONFIG=", "HOME=" + t.TempDir(), // no kubeconfig to fall back on
	}
	ns := testkit.Namespace(t, cp.Config())
	// Serving /metrics as the Deployment does: HTTPS (the default), a
	// self-signed certificate, to callers RBAC allows.
	// --events=all: a success gets an Event too, the one this test waits for.
	p := startBinary(t, env, "--serviceaccount-dir", sa, "--namespace", ns, "--leader-elect", "--events=all", "-v=2",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=localhost:0")

	p.waitLog(t, 30*time.Second, regexp.MustCompile(`"Client configuration" source="in-cluster" server="`+regexp.QuoteMeta(cp.APIServer.URL)+`"`))
	p.waitLog(t, 30*time.Second, regexp.MustCompile(`"Authenticated" user="system:serviceaccount:rawwatch-system:rawwatch"`))
	identity := p.waitLog(t, 30*time.Second, regexp.MustCompile(`"Became the leader: starting the workers" .*?identity="([^"]+)"`))[1]

	c := testkit.Client(t, cp.Config())
	created := testkit.Create(t, c, ns, "in-cluster", "as a service account")
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, err := c.Get(ctx, ns, "in-cluster")
		return err == nil && o.Status.Phase == v1alpha1.PhaseProcessed && o.Status.ObservedGeneration == o.Generation
	}, "not reconciled with the in-cluster identity")
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	testkit.Eventually(t, 30*time.Second, func() bool {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(created.UID)})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Reason == myresource.ReasonProcessed
	}, "no Event recorded with the in-cluster identity")

	// The Lease (default name, in the namespace read from the mounted file).
	leases := kube.CoordinationV1().Leases("rawwatch-system")
	lease, err := leases.Get(ctx, "rawwatch", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != identity {
		t.Fatalf("lease rawwatch-system/rawwatch: %+v, %v; want held by %s", lease.Spec, err, identity)
	}
	// client-go records "<identity> became leader" on the Lease.
	testkit.Eventually(t, 30*time.Second, func() bool {
		evs, err := kube.CoreV1().Events("rawwatch-system").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease,reason=LeaderElection"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Message == identity+" became leader" {
				return true
			}
		}
		return false
	}, "no LeaderElection Event on the Lease")

	// A scraper bound to config/rbac's rawwatch-metrics-reader reads
	// /metrics; without a token, or without the role, it may not.
	metrics, probes := p.addresses(t)
	if !strings.HasPrefix(metrics, "https://") || !strings.HasPrefix(probes, "http://") {
		t.Fatalf("metrics served on %s, probes on %s: want HTTPS and plain HTTP", metrics, probes)
	}
	scraper := testkit.ServiceAccountToken(t, cp.Config(), ns, "scraper")
	testkit.BindClusterRole(t, cp.Config(), "rawwatch-metrics-reader", ns, "scraper")
	stranger := testkit.ServiceAccountToken(t, cp.Config(), ns, "stranger")
	// The controller's certificate is self-signed: trusted as Prometheus's
	// insecure_skip_verify would.
	insecure := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for token, want := range map[string]int{"": 401, stranger: 403, scraper: 200} {
		if code, body := testkit.BearerGet(t, insecure, metrics+"/metrics", token); code != want || (want == 200 && !strings.Contains(body, "rawwatch_leader 1")) {
			t.Errorf("GET %s/metrics: %d %.200q, want %d", metrics, code, body, want)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	lease, err = leases.Get(ctx, "rawwatch", metav1.GetOptions{})
	if err != nil || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
		t.Errorf("lease not released on shutdown: %+v, %v", lease.Spec, err)
	}
	if strings.Contains(p.output(), "forbidden") {
		t.Errorf("a request was forbidden: config/rbac is missing a permission\n%s", p.output())
	}
}
