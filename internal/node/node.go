// Package node runs a real single-node Kubernetes cluster on this machine:
// etcd and kube-apiserver (internal/controlplane), kube-controller-manager,
// kube-scheduler, kube-proxy and a kubelet on containerd and runc, with
// pods on a CNI bridge — everything a Deployment of the controller meets in
// a cluster, nothing faked.
//
// It runs in a network namespace of its own (Isolate): its ports, its
// iptables rules (kube-proxy's, which route the kubernetes Service to the
// apiserver) and its pods' traffic stay in it, and nothing sent there can
// leave the machine. Its processes and pods run in cgroups of their own, so
// that tearing it down finds every one, containerd's shims included. Images
// are not pulled: they are imported into containerd from tarballs
// (hack/image.sh), and the pod sandbox's image is one of them.
//
// The binaries come from bin/ (hack/ensure-tools.sh builds kubelet,
// kube-controller-manager, kube-scheduler and kube-proxy from the same
// module as kube-apiserver); containerd, runc, the CNI plugins, iptables
// and conntrack from Debian (hack/ensure-node.sh). docs/operations.md says
// what this kernel needs of the kubelet and why.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/internal/controlplane"
)

// PauseImage is the pod sandbox's image (hack/image.sh builds it).
const PauseImage = "rawwatch-pause:1"

// Options configure Start.
type Options struct {
	// Name is the node's isolation name (Isolated's): the kubelet's
	// cgroupRoot.
	Name string
	// Dir holds the node's state and logs.
	Dir string
	// Images are image tarballs to import into containerd (the pause
	// image's among them).
	Images []string
	// Logf reports progress (optional).
	Logf func(format string, args ...any)
}

// Node is a running single-node cluster.
type Node struct {
	*controlplane.ControlPlane
	// Dir holds the node's state and logs (*.log).
	Dir string
	// Kubeconfig is an admin kubeconfig (the control plane's).
	Kubeconfig string

	opts       Options
	bin        string
	certs      *nodeCerts
	containerd *controlplane.Process
	kubelet    *controlplane.Process
	others     []*controlplane.Process
}

// CannotStart says why a node cannot start on this machine, "" when it can:
// it needs root (namespaces, cgroups, mounts), the node's programs, and a
// cgroup hierarchy with the memory controller.
func CannotStart() string {
	if os.Geteuid() != 0 {
		return "the node needs root (network namespace, cgroups, mounts, containerd)"
	}
	for _, p := range []string{"containerd", "runc", "ctr", "iptables", "conntrack", "nsenter", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " is not installed (hack/ensure-node.sh installs the node's Debian packages)"
		}
	}
	if root, err := controlplane.RepoRoot(); err == nil {
		for _, p := range append([]string{"etcd", "kube-apiserver", "kubectl"}, Programs...) {
			if _, err := os.Stat(filepath.Join(root, "bin", p)); err != nil {
				return "bin/" + p + " is missing (make node-tools builds it)"
			}
		}
	}
	if _, err := os.Stat(filepath.Join(cniBin, "bridge")); err != nil {
		return "the CNI plugins are not installed in " + cniBin + " (containernetworking-plugins)"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			return "no cgroup memory controller at /sys/fs/cgroup"
		}
	}
	return ""
}

// Programs are the node's programs that hack/ensure-tools.sh builds into
// bin/, beside the control plane's.
var Programs = []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// Prepare builds the node's programs into bin/ when missing (minutes, once:
// they are cached like kube-apiserver) and installs Debian's containerd,
// runc, CNI plugins, iptables and conntrack when missing and root may.
func Prepare() error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	for _, script := range [][]string{
		append([]string{"ensure-tools.sh", "etcd", "kube-apiserver", "kubectl"}, Programs...),
		{"ensure-node.sh"},
	} {
		cmd := exec.Command(filepath.Join(root, "hack", script[0]), script[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("hack/%s: %w", strings.Join(script, " "), err)
		}
	}
	return nil
}

// cniBin is where Debian's containernetworking-plugins puts the plugins.
const cniBin = "/usr/lib/cni"

// Start brings the node up inside the namespace Isolate made (it must run
// there) and waits until the node is Ready.
func Start(ctx context.Context, opts Options) (n *Node, err error) {
	if _, ok := Isolated(); !ok {
		return nil, errors.New("node.Start runs only inside the namespace node.Isolate makes")
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := joinCgroups(opts.Name); err != nil {
		return nil, err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	n = &Node{opts: opts, Dir: opts.Dir, bin: filepath.Join(root, "bin")}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	audit := filepath.Join(n.Dir, "audit-policy.yaml")
	if err := os.WriteFile(audit, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	cpDir := filepath.Join(n.Dir, "cp")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		return nil, err
	}
	if n.certs, err = writeNodeCerts(filepath.Join(n.Dir, "pki")); err != nil {
		return nil, err
	}
	n.ControlPlane, err = controlplane.Start(ctx, controlplane.Options{Dir: cpDir, Logf: opts.Logf, ServiceAccountAdmission: true, APIServerArgs: []string{
		// Inside the node's namespace: the pods reach it through the
		// kubernetes Service, which kube-proxy sends to NodeIP.
		"--bind-address=0.0.0.0", "--advertise-address=" + NodeIP,
		"--kubelet-preferred-address-types=InternalIP",
		"--client-ca-file=" + n.certs.ca, // the kubelet's client certificate
		"--kubelet-client-certificate=" + n.certs.apiserverCert, "--kubelet-client-key=" + n.certs.apiserverKey,
		"--authorization-mode=Node", "--enable-admission-plugins=NodeRestriction", // RBAC is on already: repeated, the flag adds
		"--audit-policy-file=" + audit, "--audit-log-path=" + n.AuditLog(),
	}})
	if err != nil {
		return nil, err
	}
	n.Kubeconfig = n.ControlPlane.Kubeconfig
	if err := n.certs.writeKubeletKubeconfig(n.kubeletKubeconfig(), n.APIServer.URL, n.CAFile()); err != nil {
		return nil, err
	}
	opts.Logf("node: control plane up; starting containerd")
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for _, img := range opts.Images {
		if err := n.Ctr("images", "import", img); err != nil {
			return nil, err
		}
	}
	if err := n.startComponents(); err != nil {
		return nil, err
	}
	if n.kubelet, err = n.startKubelet(); err != nil {
		return nil, err
	}
	opts.Logf("node: waiting for the node to be Ready")
	if err := n.waitReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// AuditLog is the apiserver's audit log: the controller's requests, with the
// ID of the token each came with (auditPolicy).
func (n *Node) AuditLog() string { return filepath.Join(n.Dir, "audit.log") }

// auditPolicy records, at Metadata level, the requests of service accounts
// in rawwatch-system: their user's extra holds the credential ID (the
// token's JTI), which shows which token a request came with.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:rawwatch-system"]
- level: None
`

func (n *Node) containerdDir() string { return filepath.Join(n.Dir, "containerd") }

// Socket is containerd's CRI socket.
func (n *Node) Socket() string { return filepath.Join(n.containerdDir(), "containerd.sock") }

func (n *Node) startContainerd(ctx context.Context) error {
	dir := n.containerdDir()
	cniConf := filepath.Join(n.Dir, "cni", "net.d")
	for _, d := range []string{dir, cniConf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-rawwatch.conflist"), []byte(fmt.Sprintf(cniConfig, PodCIDR, filepath.Join(n.Dir, "cni", "ipam"))), 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), n.Socket(),
		PauseImage, filepath.Join(dir, "runc"), cniBin, cniConf)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	p, err := controlplane.StartProcess(n.Dir, "containerd", "containerd", "--config", path)
	if err != nil {
		return err
	}
	n.containerd = p
	return p.WaitFor(ctx, 30*time.Second, func() bool {
		c, err := net.Dial("unix", n.Socket())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// containerdConfig: root, state, socket and runc's state under the node's
// directory; the pause image built here; runc with cgroupfs, as the
// kubelet's cgroupDriver; the pods' network namespaces mounted under the
// state directory; no oom_score_adj below containerd's own (root here
// lacks CAP_SYS_RESOURCE, which lowering it takes: the kubelet asks -998
// for the sandbox and runc would fail to start it); images never pulled
// (nothing is configured to pull from).
const containerdConfig = `version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`

// cniConfig: one bridge for every pod, its gateway the node's route out of
// the pod; addresses from host-local with its state under the node's
// directory. No masquerade: nothing leaves the namespace.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "rawwatch-node",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": %q
    }
  }]
}
`

// Ctr runs ctr against the node's containerd in the k8s.io namespace, the
// kubelet's.
func (n *Node) Ctr(args ...string) error {
	out, err := exec.Command("ctr", append([]string{"--address", n.Socket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (n *Node) startComponents() error {
	kubeconfig := n.Kubeconfig
	for _, c := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--root-ca-file=" + n.CAFile(), // published to every namespace: the pods' projected kube-root-ca.crt
			"--leader-elect=false", "--bind-address=127.0.0.1",
			"--controllers=*", "--allocate-node-cidrs=false",
		}},
		{"kube-scheduler", []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--leader-elect=false", "--bind-address=127.0.0.1",
		}},
		{"kube-proxy", []string{
			"--kubeconfig=" + kubeconfig, "--hostname-override=" + NodeName,
			"--proxy-mode=iptables", "--cluster-cidr=" + PodCIDR,
			// The conntrack table's size and timeouts are machine-wide
			// settings: left as they are.
			"--conntrack-max-per-core=0", "--conntrack-min=0",
			"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
			"--iptables-localhost-nodeports=false",
		}},
	} {
		p, err := controlplane.StartProcess(n.Dir, c.name, filepath.Join(n.bin, c.name), c.args...)
		if err != nil {
			return err
		}
		n.others = append(n.others, p)
	}
	return nil
}

func (n *Node) kubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

func (n *Node) kubeletKubeconfig() string { return filepath.Join(n.Dir, "kubelet.kubeconfig") }

func (n *Node) startKubelet() (*controlplane.Process, error) {
	dir := n.kubeletDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	config := filepath.Join(n.Dir, "kubelet-config.yaml")
	text := fmt.Sprintf(kubeletConfig, n.certs.ca, "/"+n.opts.Name, "unix://"+n.Socket(), filepath.Join(n.Dir, "pod-logs"))
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		return nil, err
	}
	return controlplane.StartProcess(n.Dir, "kubelet", filepath.Join(n.bin, "kubelet"),
		"--config="+config, "--kubeconfig="+n.kubeletKubeconfig(), "--root-dir="+dir, "--cert-dir="+filepath.Join(dir, "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1")
}

// kubeletConfig: see docs/operations.md ("The single-node cluster") for why
// each setting is what it is on this machine.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: %q
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: %q
podLogsDir: %q
resolvConf: ""
readOnlyPort: 0
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
`

func (n *Node) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(n.Config())
	if err != nil {
		return err
	}
	return n.kubelet.WaitFor(ctx, 3*time.Minute, func() bool {
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				// The default ServiceAccount and the root CA's ConfigMap
				// are made by the controller manager: a pod needs both.
				_, err1 := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
				_, err2 := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
				return err1 == nil && err2 == nil
			}
		}
		return false
	})
}

// RestartKubelet stops the kubelet and starts it again, as an upgrade or a
// crash would: the pods keep running, and the kubelet finds them again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.kubelet.Stop()
	var err error
	if n.kubelet, err = n.startKubelet(); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

// PodDir is the kubelet's directory of the pod with this UID (its volumes).
func (n *Node) PodDir(uid string) string { return filepath.Join(n.kubeletDir(), "pods", uid) }

// Stop stops the node's programs: the kubelet first (no pod is restarted),
// then the rest. The pods' processes, mounts and cgroups are Isolate's to
// remove, once this process has ended.
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.Stop()
	}
	for _, p := range n.others {
		p.Stop()
	}
	if n.containerd != nil {
		n.containerd.Stop()
	}
	if n.ControlPlane != nil {
		n.ControlPlane.Stop()
	}
}
