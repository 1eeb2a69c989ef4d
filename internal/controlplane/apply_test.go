package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
)

var shared = &controlplane.Shared{}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// The RBAC manifests apply cleanly (server-side), and a token for their
// ServiceAccount authenticates as it.
func TestApplyRBACAndServiceAccountToken(t *testing.T) {
	cp := shared.Get(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rawwatch-system"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root, _ := controlplane.RepoRoot()
	files, _ := filepath.Glob(filepath.Join(root, "config", "rbac", "*.yaml"))
	var manifests []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			manifests = append(manifests, f)
		}
	}
	if err := controlplane.Apply(ctx, cp.Config(), manifests...); err != nil {
		t.Fatal(err)
	}
	if err := controlplane.Apply(ctx, cp.Config(), manifests...); err != nil {
		t.Fatalf("applying again must be a no-op: %v", err)
	}
	token := testkit.ServiceAccountToken(t, cp.Config(), "rawwatch-system", "rawwatch")
	as := kubernetes.NewForConfigOrDie(cp.APIServer.ConfigWithToken(token))
	review, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && review.Status.UserInfo.Username != "system:serviceaccount:rawwatch-system:rawwatch" {
		t.Fatalf("token authenticates as %q", review.Status.UserInfo.Username)
	}
	if err != nil {
		t.Fatal(err)
	}
}
