package controlplane_test

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The RBAC manifests apply cleanly (server-side), and a token for their
// ServiceAccount authenticates as it.
func TestApplyRBACAndServiceAccountToken(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	testkit.InstallRBAC(t, cp.Config())
	if err := controlplane.Apply(ctx, cp.Config(), testkit.RBACManifests(t)...); err != nil {
		t.Fatalf("applying again must be a no-op: %v", err)
	}
	token := testkit.ServiceAccountToken(t, cp.Config(), testkit.ControllerNamespace, testkit.ControllerServiceAccount)
	as := kubernetes.NewForConfigOrDie(cp.APIServer.ConfigWithToken(token))
	review, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err == nil && review.Status.UserInfo.Username != "system:serviceaccount:rawwatch-system:rawwatch" {
		t.Fatalf("token authenticates as %q", review.Status.UserInfo.Username)
	}
	if err != nil {
		t.Fatal(err)
	}
}
