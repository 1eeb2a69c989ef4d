package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"rawwatch/internal/testkit"
)

// The memory limit is lowered, as an operator would on a small cluster
// (limit 64Mi, GOMEMLIMIT at about 90% of it, as the manifest pairs them),
// so that the objects that overflow it are 75 MB rather than 300: MyResources
// with large annotations, which the controller's cache keeps. The kernel
// kills the controller at its limit (OOMKilled, as the kubelet reports it);
// the kubelet starts it again; once the large objects are gone it
// converges: Ready again, every remaining object reconciled.
func TestAPodKilledAtItsMemoryLimitComesBackAndConverges(t *testing.T) {
	needNode(t)
	deploy(t, "config/default", deployedTagOr(tagA))
	ctx := context.Background()
	patch := `[{"op":"replace","path":"/spec/template/spec/containers/0/resources/limits/memory","value":"64Mi"},
	           {"op":"replace","path":"/spec/template/spec/containers/0/env/0","value":{"name":"GOMEMLIMIT","value":"57MiB"}}]`
	if _, err := kube.AppsV1().Deployments(systemNS).Patch(ctx, deployment, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deployed.changed = true
	waitRolledOut(t, 3*time.Minute)

	big := testkit.Namespace(t, cluster.Config())
	payload := strings.Repeat("x", 250_000)
	const bigObjects = 300
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				o := testkit.New(big, fmt.Sprintf("big-%d", i), "large")
				o.Annotations = map[string]string{"example.com/payload": payload}
				if _, err := mr.Create(ctx, o); err != nil {
					t.Errorf("creating a large object: %v", err)
				}
			}
		})
	}
	for i := range bigObjects {
		next <- i
	}
	close(next)
	wg.Wait()
	var killed string
	waitUntil(t, 3*time.Minute, func() (bool, string) {
		for _, p := range controllerPods(t) {
			cs := p.Status.ContainerStatuses
			if len(cs) == 1 && cs[0].LastTerminationState.Terminated != nil && cs[0].LastTerminationState.Terminated.Reason == "OOMKilled" {
				killed = p.Name
				return true, ""
			}
		}
		return false, "no controller container OOMKilled yet"
	})
	t.Logf("%d objects of %d KB: %s OOMKilled %s after the first was created", bigObjects, len(payload)/1000, killed, time.Since(start).Round(time.Second))

	dyn := dynamic.NewForConfigOrDie(cluster.Config())
	if err := dyn.Resource(myresources).Namespace(big).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	small := testkit.Namespace(t, cluster.Config())
	testkit.Objects(t, mr, small, "small", 20)
	recovered := time.Now()
	waitProcessed(t, small, 20, 4*time.Minute)
	waitRolledOut(t, 4*time.Minute)
	for _, p := range controllerPods(t) {
		if p.Name == killed {
			t.Logf("%s: %d restarts, Ready again and converged %s after the large objects went", p.Name,
				p.Status.ContainerStatuses[0].RestartCount, time.Since(recovered).Round(time.Second))
			return
		}
	}
	t.Errorf("the pod %s that was OOMKilled is gone: it was replaced, not restarted", killed)
}
