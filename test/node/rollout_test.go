package node

import (
	"cmp"
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/internal/testkit"
)

// readyPods counts the controller's Ready pods, terminating ones included
// (a pod still serving while it drains counts).
func readyPods(t *testing.T) int {
	list, err := kube.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=rawwatch,app.kubernetes.io/component=controller"})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// make deploy with a new image tag rolls the Deployment over (maxSurge 1,
// maxUnavailable 0): never fewer Ready pods than the PodDisruptionBudget
// allows (2 - maxUnavailable 1), every pod on the new image at the end,
// the objects made during the rollout reconciled and none written twice.
func TestARollingUpdateKeepsThePDB(t *testing.T) {
	needNode(t)
	deploy(t, "config/default", tagA)
	ns, writes := processedObjects(t, 100)

	var mu sync.Mutex
	minReady, samples := 2, 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if n := readyPods(t); n >= 0 {
				mu.Lock()
				minReady, samples = min(minReady, n), samples+1
				mu.Unlock()
			}
		}
	}()
	go func() { _ = testkit.CreateMany(context.Background(), mr, ns, "during", 100) }()
	start := time.Now()
	deploy(t, "config/default", tagB)
	took := time.Since(start)
	close(stop)
	<-sampled
	for _, p := range controllerPods(t) {
		if img := p.Status.ContainerStatuses[0].Image; img != "docker.io/library/rawwatch:"+tagB {
			t.Errorf("pod %s runs %s after the rollout", p.Name, img)
		}
	}
	waitProcessed(t, ns, 200, 2*time.Minute)
	twice, gens := writes.twice(t)
	t.Logf("rolling update rawwatch:%s -> rawwatch:%s: %s; fewest Ready pods %d (%d samples, PDB minimum 1); %d object generations written, %d written twice",
		tagA, tagB, took.Round(time.Second), minReady, samples, gens, len(twice))
	if minReady < 1 {
		t.Errorf("the rollout left %d Ready pods at one point; the PodDisruptionBudget allows one fewer than 2", minReady)
	}
	if len(twice) > 0 {
		t.Errorf("objects reconciled twice: %v", twice)
	}
}

// A drain evicts the controller's pods one at a time: the
// PodDisruptionBudget (maxUnavailable 1) lets the first eviction through
// and refuses the second (429) until the first pod's replacement is Ready.
func TestThePDBRefusesASecondEviction(t *testing.T) {
	needNode(t)
	deploy(t, "config/default", deployedTagOr(tagA))
	waitUntil(t, time.Minute, func() (bool, string) {
		pdb, err := kube.PolicyV1().PodDisruptionBudgets(systemNS).Get(context.Background(), "rawwatch", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pdb.Status.DisruptionsAllowed == 1, "PDB status " + pdb.Status.String()
	})
	pods := controllerPods(t)
	evict := func(name string) error {
		return kube.PolicyV1().Evictions(systemNS).Evict(context.Background(), &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: systemNS}})
	}
	if err := evict(pods[0].Name); err != nil {
		t.Fatalf("the first eviction: %v", err)
	}
	err := evict(pods[1].Name)
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("the second eviction, with the first pod's replacement not Ready yet: %v, want 429 (the PDB)", err)
	}
	t.Logf("second eviction refused: %v", err)
	waitRolledOut(t, 2*time.Minute)
}

// deployAny leaves what is deployed as it is, if its pods run as make
// deploy made them; otherwise it deploys config/default.
func deployAny(t *testing.T) {
	t.Helper()
	if deployed.config == "" || deployed.changed {
		deploy(t, cmp.Or(deployed.config, "config/default"), deployedTagOr(tagA))
	}
}

// deployedTagOr is the tag deployed now, or tag if none is.
func deployedTagOr(tag string) string {
	if deployed.tag != "" {
		return deployed.tag
	}
	return tag
}
