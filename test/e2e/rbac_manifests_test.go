package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"rawwatch/freshness"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
)

// What each configuration lets the controller's ServiceAccount do, asked of
// the real apiserver's RBAC (SubjectAccessReviews): what the binary does in
// it, and nothing it does not. The RBAC objects of each rendered
// kustomization are applied under a namespace and names of their own (the
// other tests share rawwatch-system and its ServiceAccount), the way the
// apiserver would hold them in a cluster.
//
//   - config/default: leader election reads and renews the Lease rawwatch,
//     no other; it creates none but that (create cannot be limited by name);
//     no MyResource may be created or patched.
//   - with config/components/freshness-probe: the probe's object is shipped
//     and may be patched, by name; still no MyResource may be created.
//   - config/sharded: the ring's Leases (names not fixed: every Lease in the
//     namespace); the leader-election Role is not there.
//
// And the two ClusterRoles for readers: rawwatch-metrics-reader scrapes and
// cannot open the live page; rawwatch-page-reader opens it and cannot scrape.
func TestManifestsGrantWhatIsUsedAndNoMore(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	config := filepath.Join(root, "config")

	// config/default with the probe's component, as a user's overlay has it
	// (kustomize takes relative paths only).
	probed := t.TempDir()
	rel := func(dir string) string {
		r, err := filepath.Rel(probed, filepath.Join(config, dir))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n",
		rel("default"), rel(filepath.Join("components", "freshness-probe")))
	if err := os.WriteFile(filepath.Join(probed, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}

	type check struct {
		verb, resource, name string // resource: "leases", "myresources", "myresources/status", ...
		allowed              bool
	}
	leaderElection := []check{
		{"get", "leases", "rawwatch", true}, {"update", "leases", "rawwatch", true}, {"create", "leases", "", true},
		{"get", "leases", "other-app", false}, {"update", "leases", "other-app", false}, {"delete", "leases", "other-app", false},
		{"delete", "leases", "rawwatch", false}, {"list", "leases", "", false}, {"patch", "leases", "rawwatch", false},
	}
	noProbe := []check{{"create", "myresources", "", false}, {"patch", "myresources", freshness.DefaultName, false}}
	probe := []check{
		{"patch", "myresources", freshness.DefaultName, true},
		{"create", "myresources", "", false}, {"update", "myresources", freshness.DefaultName, false},
		{"delete", "myresources", freshness.DefaultName, false}, {"patch", "myresources", "someone-elses", false},
	}
	ring := []check{ // every verb of package ring, on any name: see config/sharded/sharding_role.yaml
		{"get", "leases", "rawwatch-pod-1", true}, {"list", "leases", "", true}, {"create", "leases", "", true},
		{"update", "leases", "rawwatch-pod-1", true}, {"delete", "leases", "rawwatch-pod-1", true},
		{"watch", "leases", "", false}, {"patch", "leases", "rawwatch-pod-1", false},
	}
	for _, c := range []struct {
		name, dir string
		checks    []check
		absent    []string // objects the rendered output must not have
	}{
		{"config/default", filepath.Join(config, "default"), slices.Concat(leaderElection, noProbe), []string{"Role rawwatch-system/rawwatch-freshness-probe"}},
		{"config/default with the freshness probe", probed, slices.Concat(leaderElection, probe), nil},
		{"config/sharded", filepath.Join(config, "sharded"), slices.Concat(ring, noProbe),
			[]string{"Role rawwatch-system/rawwatch-leader-election", "RoleBinding rawwatch-system/rawwatch-leader-election"}},
	} {
		t.Run(strings.ReplaceAll(c.name, "/", "-"), func(t *testing.T) {
			objs, err := controlplane.DecodeYAML(kustomize(t, c.dir))
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			for _, o := range objs {
				ids[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = true
			}
			for _, id := range c.absent {
				if ids[id] {
					t.Errorf("%s renders %s, which nothing in it uses", c.name, id)
				}
			}
			ns := testkit.Namespace(t, cp.Config())
			applyRBACAs(t, cp, objs, ns)
			sa := "system:serviceaccount:" + ns + ":rawwatch"
			// Common to all: the ClusterRole and the guard of the endpoints.
			all := []check{
				{"list", "myresources", "", true}, {"watch", "myresources", "", true}, {"get", "myresources", "x", false},
				{"update", "myresources/status", "x", true}, {"patch", "myresources/status", "x", false},
				{"update", "myresources", "x", false}, {"delete", "myresources", "x", false},
				{"create", "events", "", true}, {"patch", "events", "x", true},
				{"get", "secrets", "x", false}, {"list", "pods", "", false},
			}
			for _, k := range slices.Concat(all, c.checks) {
				if got := allowed(t, kube, sa, ns, k.verb, k.resource, k.name); got != k.allowed {
					t.Errorf("%s: may the ServiceAccount %s %s %q in its namespace? %v, want %v", c.name, k.verb, k.resource, k.name, got, k.allowed)
				}
			}
			for _, review := range []string{"tokenreviews", "subjectaccessreviews"} {
				if !allowed(t, kube, sa, "", "create", review, "") {
					t.Errorf("%s: the ServiceAccount may not create %s: secure serving needs them", c.name, review)
				}
			}
			if c.dir != probed {
				return
			}
			// The probe's object ships, the probe is on.
			if !ids["MyResource rawwatch-system/"+freshness.DefaultName] {
				t.Errorf("the component does not ship the probe's object")
			}
			for _, o := range objs {
				if o.GetKind() == "Deployment" && !strings.Contains(fmt.Sprint(o.Object), "--freshness-probe=") {
					t.Errorf("the component does not pass --freshness-probe")
				}
			}
		})
	}

	// The readers' ClusterRoles, bound as their comments say.
	objs, err := controlplane.DecodeYAML(kustomize(t, filepath.Join(config, "default")))
	if err != nil {
		t.Fatal(err)
	}
	ns := testkit.Namespace(t, cp.Config())
	applyRBACAs(t, cp, objs, ns)
	for role, sa := range map[string]string{"rawwatch-metrics-reader": "prometheus", "rawwatch-page-reader": "viewer"} {
		testkit.BindClusterRole(t, cp.Config(), role+"-"+ns, ns, sa)
	}
	for _, c := range []struct {
		sa, path string
		allowed  bool
	}{
		{"prometheus", "/metrics", true}, {"prometheus", "/ui", false}, {"prometheus", "/ui/", false}, {"prometheus", "/ui/events", false},
		{"viewer", "/ui", true}, {"viewer", "/ui/", true}, {"viewer", "/ui/events", true}, {"viewer", "/metrics", false},
		{"rawwatch", "/metrics", false}, {"rawwatch", "/ui/", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + ns + ":" + c.sa, Groups: saGroups(ns),
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: c.path, Verb: "get"}}}
		got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != c.allowed {
			t.Errorf("may %s get %s? %v, want %v", c.sa, c.path, got.Status.Allowed, c.allowed)
		}
	}
}

func saGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// allowed asks the apiserver whether the ServiceAccount user may verb the
// resource (with its subresource after a slash) named name (any, if "") in
// namespace ns (cluster-wide, if "").
func allowed(t *testing.T, kube kubernetes.Interface, user, ns, verb, resource, name string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(resource, "/")
	group := map[string]string{"leases": "coordination.k8s.io", "myresources": "example.com",
		"tokenreviews": "authentication.k8s.io", "subjectaccessreviews": "authorization.k8s.io"}[res]
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: saGroups(strings.Split(user, ":")[2]),
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group,
			Resource: res, Subresource: sub, Name: name}}}
	got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed
}

// applyRBACAs applies the RBAC objects among objs as if rawwatch-system were
// ns: their namespace, their subjects' and, for the cluster-wide ones, their
// names (suffixed with ns, and so the references to them). The objects are
// deleted at the end of the test.
func applyRBACAs(t *testing.T, cp *controlplane.ControlPlane, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	var out []byte
	var cluster []string
	for _, o := range objs {
		kind := o.GetKind()
		if !slices.Contains([]string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, kind) {
			continue
		}
		o = o.DeepCopy()
		if o.GetNamespace() != "" {
			o.SetNamespace(ns)
		}
		if strings.HasPrefix(kind, "Cluster") {
			o.SetName(o.GetName() + "-" + ns)
			cluster = append(cluster, kind+"/"+o.GetName())
		}
		if ref, ok := o.Object["roleRef"].(map[string]any); ok && ref["kind"] == "ClusterRole" {
			ref["name"] = ref["name"].(string) + "-" + ns
		}
		if subjects, ok := o.Object["subjects"].([]any); ok {
			for _, s := range subjects {
				if s := s.(map[string]any); s["namespace"] == testkit.ControllerNamespace {
					s["namespace"] = ns
				}
			}
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, data...), '\n')
	}
	path := filepath.Join(t.TempDir(), "rbac.json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(context.Background(), cp.Config(), path); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	t.Cleanup(func() {
		ctx := context.Background()
		for _, c := range cluster {
			kind, name, _ := strings.Cut(c, "/")
			if kind == "ClusterRole" {
				_ = kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
			} else {
				_ = kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
			}
		}
	})
}
