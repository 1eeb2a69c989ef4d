package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"rawwatch/internal/testkit"
)

// fetchFromPod runs the scraper image (hack/image/fetch) as ServiceAccount
// sa of ns, GETting url with that account's projected token, and returns
// what it printed: "status N" and the body.
func fetchFromPod(t *testing.T, ns, sa, url string) string {
	t.Helper()
	ctx := context.Background()
	name := "fetch-" + sa
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			RestartPolicy:      corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "fetch", Image: "rawwatch-fetch:1", ImagePullPolicy: corev1.PullNever, Args: []string{url},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, func() (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, "pod phase " + string(p.Status.Phase)
	})
	b, err := kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// /metrics, served over HTTPS on the controller's pods, is scraped through
// the rawwatch-metrics Service from a pod in another namespace, with its
// ServiceAccount's projected token: bound to the ClusterRole
// rawwatch-metrics-reader (config/rbac), it reads the metrics; without
// the binding, the controller's authorization check refuses it (403).
func TestMetricsAreScrapedFromAnotherPodWithAToken(t *testing.T) {
	needNode(t)
	deployAny(t)
	ctx := context.Background()
	ns := testkit.Namespace(t, cluster.Config())
	for _, sa := range []string{"scraper", "stranger"} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rawwatch-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}) })
	svc, err := kube.CoreV1().Services(systemNS).Get(ctx, "rawwatch-metrics", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s:8443/metrics", svc.Spec.ClusterIP)

	out := fetchFromPod(t, ns, "scraper", url)
	if !strings.HasPrefix(out, "status 200\n") || !strings.Contains(out, "\nrawwatch_") {
		t.Errorf("scraping %s as a bound ServiceAccount: %.600s", url, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "rawwatch_leader") {
			t.Logf("scraped through the Service: %s", l)
		}
	}
	if out := fetchFromPod(t, ns, "stranger", url); !strings.HasPrefix(out, "status 403\n") {
		t.Errorf("scraping %s as an unbound ServiceAccount: %.300s, want 403", url, out)
	}
}
