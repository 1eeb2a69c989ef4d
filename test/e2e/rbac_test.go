package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/api/v1alpha1"
	"rawwatch/freshness"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/reconcile/myresource"
)

// The binary runs with nothing but the ServiceAccount of config/rbac, its
// token obtained through the TokenRequest API as a pod would get it: it lists,
// watches, writes status and records Events, and never hits a permission it
// lacks. The same token is refused everything else: deleting, creating or
// editing MyResources, reading Secrets.
func TestLeastPrivilegeServiceAccountIsEnough(t *testing.T) {
	cp, ns, admin := testkit.Parallel(t)
	kubeconfig, token := asController(t, cp)
	ctx := context.Background()
	obj := testkit.Create(t, admin, ns, "least", "privilege")

	// --events=all: a success gets an Event too, the one this test waits for.
	p := startBinary(t, nil, "--kubeconfig", kubeconfig, "--namespace", ns, "--events=all", "-v=2")
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, err := admin.Get(ctx, ns, "least")
		return err == nil && o.Status.Phase == v1alpha1.PhaseProcessed && o.Status.ObservedGeneration == o.Generation
	}, "not reconciled by the controller running as the ServiceAccount")
	testkit.WaitForEvent(t, cp.Config(), ns, "least", "Processed, recorded by the controller running as the ServiceAccount", func(e corev1.Event) bool {
		return e.Reason == myresource.ReasonProcessed && e.Source.Component == "rawwatch"
	})
	if out := p.output(); strings.Contains(out, "forbidden") {
		t.Errorf("the controller needed a permission the role lacks:\n%s", out)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d", code)
	}

	as := testkit.Client(t, cp.APIServer.ConfigWithToken(token))
	asKube := kubernetes.NewForConfigOrDie(cp.APIServer.ConfigWithToken(token))
	changed := obj.DeepCopy()
	changed.Spec.Message = "rewritten"
	for what, err := range map[string]error{
		"delete a MyResource": as.Delete(ctx, ns, "least", metav1.DeleteOptions{}),
		"create a MyResource": func() error { _, err := as.Create(ctx, testkit.New(ns, "intruder", "x")); return err }(),
		"update a spec":       func() error { _, err := as.Update(ctx, changed); return err }(),
		"list Secrets":        func() error { _, err := asKube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err }(),
		"get a Secret":        func() error { _, err := asKube.CoreV1().Secrets(ns).Get(ctx, "any", metav1.GetOptions{}); return err }(),
		"list Pods":           func() error { _, err := asKube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err }(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as the controller's ServiceAccount: got %v, want 403 Forbidden", what, err)
		}
	}
	if _, err := admin.Get(ctx, ns, "least"); err != nil {
		t.Errorf("the object must still exist: %v", err)
	}
}

// A ServiceAccount without the binding gets 403 on its LIST: the controller
// says so clearly (naming RBAC), backs off instead of crash-looping or
// hammering the server, and starts working without a restart once the
// permission is granted.
func TestForbiddenListIsLoggedAndBackedOff(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	testkit.InstallRBAC(t, cp.Config()) // the ClusterRole; the binding is for another ServiceAccount
	ns := testkit.Namespace(t, cp.Config())
	kubeconfig, _ := kubeconfigAs(t, cp, ns, "unbound")
	admin := testkit.Client(t, cp.Config())
	ctx := context.Background()
	testkit.Create(t, admin, ns, "waiting", "for rbac")

	started := time.Now()
	p := startBinary(t, nil, "--kubeconfig", kubeconfig, "--namespace", ns)
	const denied = "Access denied: check the credentials and the RBAC rules"
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Count(p.output(), denied) >= 2 }, "no clear, repeated log line about the 403")
	time.Sleep(3 * time.Second) // watch the backoff at work
	line := ""
	for _, l := range strings.Split(p.output(), "\n") {
		if strings.Contains(l, denied) {
			line = l
		}
	}
	if !strings.Contains(line, "forbidden") || !strings.Contains(line, "system:serviceaccount:"+ns+":unbound") ||
		!strings.Contains(line, `cannot list resource \"myresources\"`) {
		t.Errorf("the log line must say who was refused what:\n%s", line)
	}
	// Backoff from 800 ms (±50%), doubling: in the first ~4 s, at most 4 tries.
	n := strings.Count(p.output(), denied)
	t.Logf("%d denied LISTs in the first %v; the last one logged:\n%s", n, time.Since(started).Round(100*time.Millisecond), line)
	if n > 4 {
		t.Errorf("%d denied LISTs: the controller is not backing off", n)
	}
	select {
	case <-p.done:
		t.Fatalf("the controller exited on a 403 (a crash loop in a Deployment):\n%s", p.output())
	default:
	}

	kube := kubernetes.NewForConfigOrDie(cp.Config())
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rawwatch"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rawwatch"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "unbound"}},
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 45*time.Second, func() bool {
		o, err := admin.Get(ctx, ns, "waiting")
		return err == nil && o.Status.Phase == v1alpha1.PhaseProcessed
	}, "not reconciled after the permission was granted")
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// --freshness-probe runs on its component's Role
// (config/components/freshness-probe): as the ServiceAccount, the binary
// patches the object the component ships again and again, without a
// forbidden; it creates nothing (the Role does not let it).
func TestFreshnessProbeRunsWithItsRole(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	component := filepath.Join(root, "config", "components", "freshness-probe")
	kubeconfig, _ := asController(t, cp, filepath.Join(component, "role.yaml"), filepath.Join(component, "probe.yaml"))
	admin := testkit.Client(t, cp.Config())
	ns := testkit.ControllerNamespace
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ns, freshness.DefaultName, metav1.DeleteOptions{}) })
	shipped, err := admin.Get(context.Background(), ns, freshness.DefaultName)
	if err != nil {
		t.Fatal(err)
	}

	p := startBinary(t, nil, "--kubeconfig", kubeconfig, "--namespace", ns, "--freshness-probe", "1s", "-v=1")
	var beats []string
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, err := admin.Get(context.Background(), ns, freshness.DefaultName)
		if err != nil {
			return false
		}
		if o.UID != shipped.UID {
			t.Fatalf("the probe's object was replaced (uid %s, shipped %s)", o.UID, shipped.UID)
		}
		if b := o.Annotations[freshness.Annotation]; b != "" && (len(beats) == 0 || beats[len(beats)-1] != b) {
			beats = append(beats, b)
		}
		return len(beats) >= 3
	}, "the shipped probe object was not patched as the ServiceAccount")
	if out := p.output(); strings.Contains(out, "forbidden") {
		t.Errorf("the probe needed a permission its role lacks:\n%s", out)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

// asController installs config/rbac and applies manifests (a component's
// Role, its objects) on cp, and returns a kubeconfig and the token of the
// controller's ServiceAccount, as kubeconfigAs does.
func asController(t *testing.T, cp *controlplane.ControlPlane, manifests ...string) (kubeconfig, token string) {
	t.Helper()
	testkit.InstallRBAC(t, cp.Config())
	if err := controlplane.Apply(context.Background(), cp.Config(), manifests...); err != nil {
		t.Fatal(err)
	}
	return kubeconfigAs(t, cp, testkit.ControllerNamespace, testkit.ControllerServiceAccount)
}

// kubeconfigAs writes a kubeconfig for cp's apiserver that authenticates as
// ServiceAccount namespace/name, with a token from the TokenRequest API as a
// pod would get it, and returns its path and the token.
func kubeconfigAs(t *testing.T, cp *controlplane.ControlPlane, namespace, name string) (kubeconfig, token string) {
	t.Helper()
	token = testkit.ServiceAccountToken(t, cp.Config(), namespace, name)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfigFor(kubeconfig, cp.APIServer.URL, token); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, token
}
