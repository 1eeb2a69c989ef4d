// Package testkit has the small helpers the tests against the local control
// plane share: a namespace per test, many objects at once, waiting, and
// reading a controller's HTTP endpoints (probes, Prometheus metrics), the
// live heap.
package testkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
)

// Shared is this test binary's local control plane, started by the first
// test that needs it and skipped under -short (controlplane.Shared). A
// package whose tests use it has Main as its TestMain.
var Shared = &controlplane.Shared{}

// Main is a TestMain: it runs the tests and stops Shared if one started it.
func Main(m *testing.M) { Shared.Main(m) }

// Start returns what most tests against the local control plane start from:
// Shared, a namespace of the test's own and a MyResource client.
func Start(t testing.TB) (cp *controlplane.ControlPlane, ns string, c *client.Client) {
	t.Helper()
	cp = Shared.Get(t)
	return cp, Namespace(t, cp.Config()), Client(t, cp.Config())
}

// Parallel marks t parallel, then Start.
func Parallel(t *testing.T) (cp *controlplane.ControlPlane, ns string, c *client.Client) {
	t.Helper()
	t.Parallel()
	return Start(t)
}

// APIServer starts another kube-apiserver on cp's etcd, with args, stopped
// when the test ends.
func APIServer(t testing.TB, cp *controlplane.ControlPlane, name string, args ...string) *controlplane.APIServer {
	t.Helper()
	a, err := cp.AddAPIServer(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return a
}

// Namespace creates a namespace named after the test and deletes it when the
// test ends.
func Namespace(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", strings.Trim(name, "-"), time.Now().UnixNano()%100000)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// Client returns a MyResource client for cfg, failing the test on error.
func Client(t testing.TB, cfg *rest.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// New returns a MyResource ready to create.
func New(namespace, name, message string) *v1alpha1.MyResource {
	return &v1alpha1.MyResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.MyResourceSpec{Message: message},
	}
}

// Create creates New(namespace, name, message) and returns what the server
// made of it, or fails t.
func Create(t testing.TB, c *client.Client, namespace, name, message string) *v1alpha1.MyResource {
	t.Helper()
	o, err := c.Create(context.Background(), New(namespace, name, message))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// CreateMany creates n MyResources named prefix-0..n-1 with 16 writers in
// parallel.
func CreateMany(ctx context.Context, c *client.Client, namespace, prefix string, n int) error {
	const writers = 16
	next := make(chan int)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for i := range next {
				if _, err := c.Create(ctx, New(namespace, fmt.Sprintf("%s-%d", prefix, i), "hello")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case err := <-errs:
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

// Objects is CreateMany for a test: it fails t on the first error.
func Objects(t testing.TB, c *client.Client, namespace, prefix string, n int) {
	t.Helper()
	if err := CreateMany(context.Background(), c, namespace, prefix, n); err != nil {
		t.Fatal(err)
	}
}

// Touch changes an object's spec: a new generation to reconcile.
func Touch(t testing.TB, c *client.Client, ns, name string) {
	t.Helper()
	o, err := c.Get(context.Background(), ns, name)
	if err == nil {
		o.Spec.Message = "touched at " + time.Now().Format(time.RFC3339Nano)
		_, err = c.Update(context.Background(), o)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// StopAtEnd cancels when the test ends and waits up to within for done to be
// closed, failing the test with msg (and args, as for Errorf) if it is not.
func StopAtEnd(t testing.TB, cancel context.CancelFunc, done <-chan struct{}, within time.Duration, msg string, args ...any) {
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(within):
			t.Errorf(msg, args...)
		}
	})
}

// RunSynced runs w, with logger in its context, until the test ends, and
// fails the test if w has not synced within a minute.
func RunSynced(t testing.TB, w interface {
	Run(context.Context)
	Synced() <-chan struct{}
}, logger logr.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-w.Synced():
	case <-time.After(time.Minute):
		t.Fatal("watcher did not sync within a minute")
	}
}

// RequestBudget is the most requests any 60 s window may hold under faults
// for the watcher's list-then-watch loop, from its backoff's Delay: a window
// holds at most one backoff reset (a reset needs ResetAfter ≥ 60 s of
// calm), so its waits are at least the minimal delays
// (1-Jitter)·Initial·Factorⁿ from n = 0; the requests between two waits are
// at most five (a WATCH that meets a 410, a WatchList that fails, the LIST
// instead, that LIST's immediate restart after an expired continue token,
// the next WATCH).
func RequestBudget(delay func(n int, r float64) time.Duration) int {
	waits, sum := 0, time.Duration(0)
	for n := 0; ; n++ {
		sum += delay(n, 0.9999999)
		if sum > time.Minute {
			break
		}
		waits++
	}
	return 5 * (waits + 1)
}

// Eventually polls cond every 20 ms until it is true or timeout passes, then
// fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ServiceAccountToken creates (if needed) ServiceAccount namespace/name and
// returns a token for it from the TokenRequest API, valid for an hour: the
// credential a pod running as that ServiceAccount would get.
func ServiceAccountToken(t testing.TB, cfg *rest.Config, namespace, name string) string {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cfg)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	hour := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// BindClusterRole binds the ClusterRole role to ServiceAccount ns/sa until
// the test ends.
func BindClusterRole(t testing.TB, cfg *rest.Config, role, ns, sa string) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role + "-" + ns + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
}

// BearerGet GETs url through c with token as a bearer token (none when
// empty). For an event stream it returns the Content-Type instead of
// reading a body that never ends.
func BearerGet(t testing.TB, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
		return resp.StatusCode, ct
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// HTTPGet fetches url and returns the status code and body (code 0 when the
// request itself failed, e.g. nothing listens yet).
func HTTPGet(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Scrape reads a Prometheus /metrics endpoint into a map from series to value:
// `name{label="value",...}` for counters and gauges (labels sorted), and
// `name_count{...}` / `name_sum{...}` for histograms and summaries.
func Scrape(t testing.TB, url string) map[string]float64 {
	t.Helper()
	code, body := HTTPGet(url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	out := map[string]float64{}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			series := ""
			if len(labels) > 0 {
				series = "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[name+series] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name+series] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[name+series] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[name+"_count"+series] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+series] = m.GetHistogram().GetSampleSum()
			case m.Summary != nil:
				out[name+"_count"+series] = float64(m.GetSummary().GetSampleCount())
				out[name+"_sum"+series] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return out
}

// StealLease writes holder into Lease namespace/name as its holder, renewed
// now and valid for a minute: what another candidate taking over looks like
// to the one that held it.
func StealLease(t testing.TB, cfg *rest.Config, namespace, name, holder string) {
	t.Helper()
	leases := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases(namespace)
	// The holder renews meanwhile: a conflict means "read it again".
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		minute, now := int32(60), metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &holder, &minute, &now
		_, err = leases.Update(context.Background(), lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taking Lease %s/%s: %v", namespace, name, err)
	}
}

// Proxy starts a fault proxy in front of apiserver a until the test ends, and
// returns it with an admin rest.Config that goes through it.
func Proxy(t testing.TB, cp *controlplane.ControlPlane, a *controlplane.APIServer) (*faultproxy.Proxy, *rest.Config) {
	t.Helper()
	p, err := cp.FaultProxy(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, a.ConfigVia(p.URL)
}

// FailingAPI is an API server that answers every request with code and a
// Status, and "Retry-After: 0" (what a proxy or a load balancer in front of
// a failing one may send); it counts the requests it answered.
func FailingAPI(t testing.TB, code int) (url string, served *atomic.Int64) {
	served = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"failing","code":%d}`, code)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, served
}

// HeapAfterGC is the live heap after a collection, for tests that bound what
// a load keeps.
func HeapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Logs collects what a logger writes, so that a test can check what was
// (not) logged.
type Logs struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger writing to l, at verbosity v.
func (l *Logs) Logger(v int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: v})
}

// Count is the number of lines containing s.
func (l *Logs) Count(s string) int { return len(l.Grep(s)) }

// Grep returns the lines containing s.
func (l *Logs) Grep(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// ControllerNamespace and ControllerServiceAccount are where config/rbac puts
// the controller's identity.
const (
	ControllerNamespace      = "rawwatch-system"
	ControllerServiceAccount = "rawwatch"
)

// InstallRBAC creates the controller's namespace (if needed) and applies
// every manifest in config/rbac with server-side apply, as an operator would.
func InstallRBAC(t testing.TB, cfg *rest.Config) {
	t.Helper()
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := controlplane.Apply(ctx, cfg, RBACManifests(t)...); err != nil {
		t.Fatal(err)
	}
}

// RBACManifests are the files of config/rbac (not its kustomization).
func RBACManifests(t testing.TB) []string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "config", "rbac", "*.yaml"))
	var manifests []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			manifests = append(manifests, f)
		}
	}
	if len(manifests) == 0 {
		t.Fatal("no manifests in config/rbac")
	}
	return manifests
}

// WaitForEvent waits up to 30 s for an Event in namespace ns about the object
// named name that match accepts (what `kubectl describe` would show), and
// fails the test with what if none comes.
func WaitForEvent(t testing.TB, cfg *rest.Config, ns, name, what string, match func(corev1.Event) bool) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(cfg)
	Eventually(t, 30*time.Second, func() bool {
		evs, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if match(e) {
				return true
			}
		}
		return false
	}, "no event: %s", what)
}
