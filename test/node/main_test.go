// Package node runs the controller the way a cluster does, on a real
// single-node cluster (internal/node): its image, built here, imported into
// containerd and started by a kubelet; config/default and config/sharded
// applied unchanged by `make deploy` (only the image named); the projected
// token, the probes, the security context, the memory limit, leader
// failover, rolling updates and the PodDisruptionBudget all as the kubelet
// and the controllers enforce them. Every test shares one node, started in
// TestMain (about a minute): the tests run inside its network namespace.
//
// Without root (or without the node's programs) the node cannot start: the
// tests that need it skip, with the reason printed once.
package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/client"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/node"
)

// The two image tags the tests run: a rolling update goes from one to the
// other. Each is the Dockerfile's binary built with that version.
const (
	tagA = "node-a"
	tagB = "node-b"
)

const (
	systemNS   = "rawwatch-system"
	deployment = "rawwatch"
)

var (
	root     string
	imageDir string
	// cannot is why the node cannot start here ("" when it runs).
	cannot string
	// the node, and clients of its apiserver.
	cluster *node.Node
	kube    *kubernetes.Clientset
	mr      *client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if root, err = controlplane.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	imageDir = filepath.Join(root, "out", "node-images")
	name, inside := node.Isolated()
	if !inside {
		// The images need no node: build them first (TestImageIsTheDockerfilesFinalStage reads them).
		for _, tag := range []string{tagA, tagB} {
			if err := buildImage(tag); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		if os.Geteuid() == 0 {
			if err := node.Prepare(); err != nil {
				fmt.Fprintln(os.Stderr, "test/node:", err)
				return 1
			}
		}
		if cannot = node.CannotStart(); cannot != "" {
			fmt.Printf("test/node: skipping the tests on a real node: %s\n", cannot)
			return m.Run()
		}
		name = node.Name(os.Getpid())
		code, err := node.Isolate(name, filepath.Join(root, "out", "node", name))
		if err != nil {
			fmt.Fprintln(os.Stderr, "test/node:", err)
			return max(code, 1)
		}
		return code
	}
	ctx := context.Background()
	start := time.Now()
	cluster, err = node.Start(ctx, node.Options{Name: name, Dir: filepath.Join(root, "out", "node", name),
		Images: []string{
			filepath.Join(imageDir, "pause.tar"), filepath.Join(imageDir, "fetch.tar"),
			filepath.Join(imageDir, "rawwatch-"+tagA+".tar"), filepath.Join(imageDir, "rawwatch-"+tagB+".tar"),
		},
		Logf: func(f string, args ...any) { fmt.Printf("test/node: "+f+"\n", args...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/node: starting the node:", err)
		return 1
	}
	fmt.Printf("test/node: node Ready in %s\n", time.Since(start).Round(time.Second))
	kube = kubernetes.NewForConfigOrDie(cluster.Config())
	if mr, err = client.New(cluster.Config()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	cluster.Stop()
	return code
}

// buildImage builds the controller's image at tag, the pause image and the
// scraper's, into imageDir (hack/image.sh).
func buildImage(tag string) error {
	cmd := exec.Command(filepath.Join(root, "hack", "image.sh"))
	cmd.Env = append(os.Environ(), "VERSION="+tag, "IMAGE_DIR="+imageDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hack/image.sh (VERSION=%s): %w\n%s", tag, err, out)
	}
	return nil
}

// needNode skips t when the node could not start here.
func needNode(t *testing.T) {
	t.Helper()
	if cannot != "" {
		t.Skip("no node: " + cannot)
	}
}

// deployed is what `make deploy` last applied.
var deployed struct {
	config, tag string
	// changed: a test altered the Deployment by hand since (resources).
	changed bool
}

// deploy makes config at tag what runs: `make deploy` as a user runs it,
// after `make undeploy` of another config (which deletes the CRD, and with
// it every MyResource); then it waits for the rollout.
func deploy(t *testing.T, config, tag string) {
	t.Helper()
	if deployed.config == config && deployed.tag == tag && !deployed.changed {
		return
	}
	if deployed.config != "" && deployed.config != config {
		mustMake(t, "undeploy", "CONFIG="+deployed.config)
		waitGone(t)
	}
	start := time.Now()
	mustMake(t, "deploy", "CONFIG="+config, "IMG=rawwatch:"+tag, "KUBECTL_ARGS=--force-conflicts")
	deployed.config, deployed.tag, deployed.changed = config, tag, false
	waitRolledOut(t, 3*time.Minute)
	t.Logf("make deploy CONFIG=%s IMG=rawwatch:%s: rolled out in %s", config, tag, time.Since(start).Round(time.Second))
}

func mustMake(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectl runs bin/kubectl against the node.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// waitRolledOut waits until the Deployment's every replica runs its
// current template and is available, and no old pod is left.
func waitRolledOut(t *testing.T, timeout time.Duration) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	waitUntil(t, timeout, func() (bool, string) {
		var err error
		d, err = kube.AppsV1().Deployments(systemNS).Get(context.Background(), deployment, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		want := *d.Spec.Replicas
		s := d.Status
		done := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
			s.AvailableReplicas == want && s.ReadyReplicas == want
		if done {
			pods := controllerPods(t)
			done = len(pods) == int(want)
		}
		return done, fmt.Sprintf("deployment status %+v", s)
	})
	return d
}

// waitGone waits until no controller pod is left.
func waitGone(t *testing.T) {
	t.Helper()
	waitUntil(t, 2*time.Minute, func() (bool, string) {
		pods := controllerPods(t)
		return len(pods) == 0, fmt.Sprintf("%d controller pods left", len(pods))
	})
}

// controllerPods are the controller's pods that are not terminating.
func controllerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	list, err := kube.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=rawwatch,app.kubernetes.io/component=controller"})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	return pods
}

// waitUntil polls cond every 200 ms until it is true, failing t with cond's
// last word after timeout.
func waitUntil(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not after %s: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podLog is the log of a pod's controller container.
func podLog(t *testing.T, pod string) string {
	t.Helper()
	b, err := kube.CoreV1().Pods(systemNS).GetLogs(pod, &corev1.PodLogOptions{Container: "rawwatch"}).Do(context.Background()).Raw()
	if err != nil {
		t.Fatalf("logs of %s: %v", pod, err)
	}
	return string(b)
}
