package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
)

// config/default, applied by make deploy, becomes Available: two pods the
// kubelet started from the imported image, Ready (their readiness probe
// passed) and not restarted (their liveness probe never failed), their
// process running as uid 65532 on a read-only root, as the kernel sees
// it; and they do their work: a MyResource gets its status.
func TestTheDeploymentBecomesAvailable(t *testing.T) {
	needNode(t)
	deploy(t, "config/default", tagA)
	d, err := kube.AppsV1().Deployments(systemNS).Get(context.Background(), deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	available := false
	for _, c := range d.Status.Conditions {
		available = available || (c.Type == "Available" && c.Status == corev1.ConditionTrue)
	}
	if !available {
		t.Fatalf("Deployment not Available: %+v", d.Status.Conditions)
	}
	pods := controllerPods(t)
	if len(pods) != 2 {
		t.Fatalf("%d controller pods, want 2", len(pods))
	}
	// Longer than the liveness probe's period times its failureThreshold
	// (10 s x 3) since the pods started: a failing probe would have
	// restarted them by now.
	started := pods[0].Status.StartTime.Time
	if time.Since(started) < 35*time.Second {
		time.Sleep(35*time.Second - time.Since(started))
	}
	for _, p := range controllerPods(t) {
		if p.Spec.NodeName != "rawwatch-node" {
			t.Errorf("pod %s on node %q", p.Name, p.Spec.NodeName)
		}
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 || !cs[0].Ready || cs[0].RestartCount != 0 || cs[0].State.Running == nil {
			t.Errorf("pod %s: container status %+v", p.Name, cs)
			continue
		}
		if cs[0].Image != "docker.io/library/rawwatch:"+tagA {
			t.Errorf("pod %s runs image %s", p.Name, cs[0].Image)
		}
		pid := containerPID(t, string(p.UID))
		status := readProc(t, pid, "status")
		if !strings.Contains(status, "\nUid:\t65532\t65532\t65532\t65532\n") || !strings.Contains(status, "\nGid:\t65532\t65532\t65532\t65532\n") {
			t.Errorf("pod %s: process %d is not uid/gid 65532:\n%s", p.Name, pid, status)
		}
		if !strings.Contains(status, "\nCapEff:\t0000000000000000\n") {
			t.Errorf("pod %s: process %d has capabilities", p.Name, pid)
		}
		if opts := rootMountOptions(t, pid); !strings.HasPrefix(opts, "ro,") && opts != "ro" {
			t.Errorf("pod %s: the container's root is mounted %q, want read-only", p.Name, opts)
		}
		cmdline := readProc(t, pid, "cmdline")
		if !strings.HasPrefix(cmdline, "/rawwatch\x00--leader-elect") {
			t.Errorf("pod %s: process %d runs %q", p.Name, pid, cmdline)
		}
		t.Logf("pod %s: process %d (%s) as the kernel sees it: %s, %s, / mounted %s", p.Name, pid,
			strings.ReplaceAll(strings.TrimSpace(cmdline), "\x00", " "), procLine(status, "Uid:"), procLine(status, "CapEff:"), rootMountOptions(t, pid))
		log := podLog(t, p.Name)
		if !strings.Contains(log, `"Authenticated" user="system:serviceaccount:rawwatch-system:rawwatch"`) {
			t.Errorf("pod %s did not authenticate with its ServiceAccount's projected token:\n%s", p.Name, log)
		}
	}
	t.Logf("kubectl get pods -o wide:\n%s", kubectl(t, "-n", systemNS, "get", "pods", "-o", "wide"))
	t.Logf("kubectl describe pod:\n%s", kubectl(t, "-n", systemNS, "describe", "pod", pods[0].Name))

	ns := testkit.Namespace(t, cluster.Config())
	testkit.Create(t, mr, ns, "hello", "from the node")
	waitProcessed(t, ns, 1, time.Minute)
	t.Logf("controller log (%s):\n%s", pods[0].Name, podLog(t, pods[0].Name))
}

// waitProcessed waits until ns holds n MyResources, each with its status
// describing its generation.
func waitProcessed(t *testing.T, ns string, n int, timeout time.Duration) []v1alpha1.MyResource {
	t.Helper()
	var items []v1alpha1.MyResource
	waitUntil(t, timeout, func() (bool, string) {
		list, err := mr.List(context.Background(), ns, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		items = list.Items
		done := 0
		for _, o := range items {
			if o.Status.Phase == v1alpha1.PhaseProcessed && o.Status.ObservedGeneration == o.Generation {
				done++
			}
		}
		return done == n && len(items) == n, fmt.Sprintf("%d of %d MyResources processed (%d exist)", done, n, len(items))
	})
	return items
}

// containerPID is the PID, on this machine, of the main process of the
// controller container of the pod with this UID: found by the pod's
// cgroup, which the kubelet names after the UID.
func containerPID(t *testing.T, uid string) int {
	t.Helper()
	var pid int
	want := "pod" + uid
	_ = filepath.WalkDir("/sys/fs/cgroup/pids", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || pid != 0 || filepath.Base(filepath.Dir(p)) != want {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var n int
			fmt.Sscan(f, &n)
			if strings.HasPrefix(readProc(t, n, "cmdline"), "/rawwatch\x00") {
				pid = n
			}
		}
		return nil
	})
	if pid == 0 {
		t.Fatalf("no /rawwatch process in the cgroups of pod %s", uid)
	}
	return pid
}

func readProc(t *testing.T, pid int, file string) string {
	t.Helper()
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	return string(b)
}

// rootMountOptions are the mount options of / as process pid sees it.
func rootMountOptions(t *testing.T, pid int) string {
	t.Helper()
	for _, l := range strings.Split(readProc(t, pid, "mountinfo"), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	t.Fatalf("process %d has no / in its mountinfo", pid)
	return ""
}

// procLine is the line of a /proc status file that starts with key.
func procLine(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, key) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return key + " (none)"
}
