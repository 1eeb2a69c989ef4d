package e2e

import (
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/app"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/leader"
	"rawwatch/reconcile"
	"rawwatch/ring"
)

// kustomize renders a kustomization with bin/kubectl's built-in kustomize.
// decode splits rendered manifests into their objects, and the set of those
// as "Kind namespace/name".
func decode(t *testing.T, rendered []byte) ([]*unstructured.Unstructured, map[string]bool) {
	t.Helper()
	objs, err := controlplane.DecodeYAML(rendered)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, o := range objs {
		ids[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = true
	}
	return objs, ids
}

func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	kubectl, err := controlplane.Tool("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderrOf(err))
	}
	return out
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// warnings collects the apiserver's Warning headers (Pod Security warns
// through them about a Deployment whose pods it would reject).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// Every manifest under config/ is part of
// the kustomization, and the whole of it applies to the real apiserver by
// server-side apply (so a schema error fails here, not in a user's cluster) —
// twice, since applying again must change nothing — with no warning from Pod
// Security's "restricted" profile.
// `make deploy` applies it too, with the image it is given. The Deployment,
// read back as the server stored it, has what the issue asks for and what the
// binary's flags need.
func TestManifests(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	config := filepath.Join(root, "config")
	rendered := kustomize(t, filepath.Join(config, "default"))
	objs, inKustomization := decode(t, rendered)
	err := filepath.WalkDir(config, func(file string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && file == filepath.Join(config, "sharded") {
			return filepath.SkipDir // the overlay: checked below
		}
		if err == nil && d.IsDir() && file == filepath.Join(config, "components") {
			return filepath.SkipDir // opt-in: TestManifestsGrantWhatIsUsedAndNoMore renders them
		}
		if err != nil || d.IsDir() || filepath.Ext(file) != ".yaml" || d.Name() == "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		path, _ := filepath.Rel(root, file)
		fileObjs, err := controlplane.DecodeYAML(data)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, o := range fileObjs {
			if id := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName(); !inKustomization[id] {
				t.Errorf("%s: %s is not in config/default's output: make deploy would not apply it", path, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].GetKind() != "Namespace" {
		t.Errorf("the Namespace must come first, before the objects in it; first is %s", objs[0].GetKind())
	}

	// make deploy, with an image on a registry with a port (its colon is not a tag).
	const image = "registry.example:5000/team/rawwatch:v1.2.3"
	deploy := exec.Command("make", "--no-print-directory", "deploy", "IMG="+image)
	deploy.Dir = root
	deploy.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	if out, err := deploy.CombinedOutput(); err != nil {
		t.Fatalf("make deploy: %v\n%s", err, out)
	}
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	dep, err := kube.AppsV1().Deployments("rawwatch-system").Get(ctx, "rawwatch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != image {
		t.Errorf("make deploy IMG=%s: the Deployment runs %s", image, got)
	}

	// The rendered manifests, server-side applied, twice.
	path := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(path, rendered, 0o600); err != nil {
		t.Fatal(err)
	}
	var warned warnings
	cfg := rest.CopyConfig(cp.Config())
	cfg.WarningHandler = &warned
	for range 2 {
		if err := controlplane.Apply(ctx, cfg, path); err != nil {
			t.Fatal(err)
		}
	}
	if len(warned.list) > 0 {
		t.Errorf("the apiserver warned: %s", strings.Join(warned.list, "; "))
	}
	if dep, err = kube.AppsV1().Deployments("rawwatch-system").Get(ctx, "rawwatch", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := kube.CoreV1().Services("rawwatch-system").Get(ctx, "rawwatch-metrics", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkDeployment(t, dep, svc, false)

	// The sharded overlay, applied over it (as a user switching would):
	// everything of the base, the ring's Role, three working replicas.
	sharded := kustomize(t, filepath.Join(config, "sharded"))
	_, inSharded := decode(t, sharded)
	leaderElection := map[string]bool{"Role rawwatch-system/rawwatch-leader-election": true, "RoleBinding rawwatch-system/rawwatch-leader-election": true}
	for id := range inKustomization {
		if !inSharded[id] && !leaderElection[id] {
			t.Errorf("config/sharded lacks %s of config/default", id)
		}
	}
	if !inSharded["Role rawwatch-system/rawwatch-sharding"] || !inSharded["RoleBinding rawwatch-system/rawwatch-sharding"] {
		t.Error("config/sharded has no Role and RoleBinding rawwatch-sharding for the ring's Leases")
	}
	shardedPath := filepath.Join(t.TempDir(), "sharded.yaml")
	if err := os.WriteFile(shardedPath, sharded, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := controlplane.Apply(ctx, cfg, shardedPath); err != nil {
			t.Fatal(err)
		}
	}
	if dep, err = kube.AppsV1().Deployments("rawwatch-system").Get(ctx, "rawwatch", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	checkDeployment(t, dep, svc, true)
	role, err := kube.RbacV1().Roles("rawwatch-system").Get(ctx, "rawwatch-sharding", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]bool{}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") {
			for _, v := range r.Verbs {
				verbs[v] = true
			}
		}
	}
	for _, v := range []string{"get", "list", "create", "update", "delete"} { // package ring's requests
		if !verbs[v] {
			t.Errorf("Role rawwatch-sharding does not allow %s on leases: the ring needs it", v)
		}
	}
}

// checkDeployment checks the base's Deployment (two replicas, leader
// election) or, sharded, the overlay's (three, --sharding).
func checkDeployment(t *testing.T, dep *appsv1.Deployment, svc *corev1.Service, sharded bool) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	replicas := int32(2)
	if sharded {
		replicas = 3
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != replicas {
		t.Errorf("replicas %v, want %d", dep.Spec.Replicas, replicas)
	}
	if pod.ServiceAccountName != "rawwatch" {
		t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
	}
	psc, sc := pod.SecurityContext, ctr.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("container securityContext %+v: want read-only root, no privilege escalation, drop ALL", sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := ctr.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := ctr.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}
	// GOMEMLIMIT must stay below the memory limit.
	for _, e := range ctr.Env {
		if e.Name == "GOMEMLIMIT" {
			soft := resource.MustParse(strings.TrimSuffix(e.Value, "B"))
			if limit := ctr.Resources.Limits[corev1.ResourceMemory]; soft.Cmp(limit) >= 0 {
				t.Errorf("GOMEMLIMIT %s is not below the memory limit %s", e.Value, limit.String())
			}
		}
	}

	// The flags: accepted by the binary, and agreeing with the ports.
	out, err := exec.Command(binary, append(append([]string{}, ctr.Args...), "--version")...).CombinedOutput()
	if err != nil {
		t.Errorf("the binary rejects the Deployment's args %v: %v\n%s", ctr.Args, err, out)
	}
	flag := func(name string) string {
		for _, a := range ctr.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
			if a == "--"+name {
				return "true"
			}
		}
		return ""
	}
	if flag("secure-serving") == "false" {
		t.Error("the Deployment serves /metrics as plain HTTP (--secure-serving=false), open to every pod")
	}
	if flag("metrics-bind-address") == flag("health-probe-bind-address") {
		t.Error("the probes share the metrics address: with secure serving they need their own (plain, for the kubelet)")
	}
	switch {
	case !sharded && flag("leader-elect") != "true":
		t.Error("the Deployment runs 2 replicas without --leader-elect")
	case sharded && (flag("sharding") != "true" || flag("leader-elect") != ""):
		t.Errorf("the sharded Deployment's args %v: want --sharding and no --leader-elect", ctr.Args)
	}
	// The kubelet's SIGKILL must not cut the drain or the Lease's release:
	// the reconciles in flight (sharded: and the deletions heard of, within
	// app.DefaultDrainTimeout of the SIGTERM), then the leader's Lease
	// released or the ring's marked leaving and deleted (ring.LeaveTimeout:
	// the mark, the wait for the slots it gave to be confirmed, the delete).
	work := max(reconcile.ReconcileTimeout, app.DefaultDrainTimeout)
	release := max(leader.ReleaseTimeout, ring.LeaveTimeout(ring.DefaultRenewPeriod))
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < work+release+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v: the drain (%s) plus the release (%s) and a margin of 5s need %s",
			g, work, release, work+release+5*time.Second)
	}
	port := func(name string) string {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return strconv.Itoa(int(p.ContainerPort))
			}
		}
		t.Errorf("no container port named %s", name)
		return ""
	}
	_, metricsPort, _ := net.SplitHostPort(flag("metrics-bind-address"))
	_, probePort, _ := net.SplitHostPort(flag("health-probe-bind-address"))
	if metricsPort != port("metrics") || probePort != port("probes") {
		t.Errorf("ports: --metrics-bind-address %s, --health-probe-bind-address %s, container ports metrics %s, probes %s",
			metricsPort, probePort, port("metrics"), port("probes"))
	}
	for probe, path := range map[*corev1.Probe]string{ctr.LivenessProbe: "/healthz", ctr.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.String() != "probes" {
			t.Errorf("want a probe GET %s on port probes, got %+v", path, probe)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v: want targetPort metrics", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if pod := dep.Spec.Template.Labels[k]; pod != v {
			t.Errorf("the Service selects %s=%s; the pods have %s=%q", k, v, k, pod)
		}
	}
}
