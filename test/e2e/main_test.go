// Package e2e runs the rawwatch binary, built from the repository root, as a
// user or a cluster would: against the local control plane, with config/'s
// manifests and RBAC, and checks the Dockerfile. Every test here shares one
// control plane (started on first use) and one binary (built once).
package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
)

// root is the repository root: the binary is built there, and config/, the
// Dockerfile and go.mod are read from there.
var root string

// binary is the rawwatch binary, built by TestMain with its version set to
// binaryVersion.
var binary string

const binaryVersion = "e2e"

func TestMain(m *testing.M) {
	var err error
	if root, err = controlplane.RepoRoot(); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "rawwatch-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "rawwatch")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+binaryVersion, "-o", binary, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		panic("building rawwatch: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	testkit.Shared.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is the rawwatch binary running in the background.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func startBinary(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("rawwatch output:\n%s", p.output())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("rawwatch did not exit within 30s of SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

func TestBinaryReconcilesAndStopsCleanly(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	p := startBinary(t, nil, "--kubeconfig", cp.Kubeconfig, "--namespace", ns, "--page-size", "10", "-v=2",
		"--ui-bind-address", "127.0.0.1:0", "--secure-serving=false")
	c := testkit.Client(t, cp.Config())
	testkit.Create(t, c, ns, "hello", "from the binary")
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, err := c.Get(context.Background(), ns, "hello")
		return err == nil && o.Status.Phase == v1alpha1.PhaseProcessed && o.Status.ObservedGeneration == o.Generation
	}, "object not processed by the binary")

	// The live page is served, and a viewer's open event stream does not
	// hold the exit back (stopping would otherwise wait out its 5 s
	// shutdown timeout for a stream that never ends).
	page := p.waitLog(t, 10*time.Second, regexp.MustCompile(`"Serving the live page[^"]*" address="([^"]+)"`))[1]
	if code, body := testkit.HTTPGet(page + "/ui/"); code != 200 || !strings.Contains(body, "rawwatch") {
		t.Fatalf("GET %s/ui/ = %d", page, code)
	}
	stream, err := http.Get(page + "/ui/events")
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("the live page's event stream: %v %v", stream, err)
	}
	defer stream.Body.Close()
	stopping := time.Now()
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	// Had the stream held the server up, it would have been cut after the
	// 5 s shutdown timeout, and said so.
	if strings.Contains(p.output(), "Stopped serving with requests still open") {
		t.Errorf("the live page's event stream held the shutdown up (stopping took %v)", time.Since(stopping))
	}
	if !strings.Contains(p.output(), "Stopped cleanly") {
		t.Error("no clean-stop log line")
	}
}

// The kubeconfig comes from $KUBECONFIG, and --context picks a context in it.
func TestBinaryUsesKubeconfigEnvAndContext(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	cfg, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// A second context whose cluster is a port nobody listens on.
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: cfg.Clusters["local"].CertificateAuthorityData}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "admin"}
	cfg.CurrentContext = "dead"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	testkit.Create(t, c, ns, "ctx", "hi")

	// The current context is dead: the controller says so, retries, and stops cleanly.
	dead := startBinary(t, []string{"KUBECONFIG=" + path}, "--namespace", ns)
	testkit.Eventually(t, 30*time.Second, func() bool {
		out := dead.output()
		return strings.Contains(out, "Request failed; backing off") && strings.Contains(out, "connection refused")
	}, "no clear error about the unreachable server")
	if code := dead.stop(t); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}

	// --context local reaches the real server.
	live := startBinary(t, []string{"KUBECONFIG=" + path}, "--context", "local", "--namespace", ns)
	testkit.Eventually(t, 30*time.Second, func() bool {
		o, err := c.Get(context.Background(), ns, "ctx")
		return err == nil && o.Status.Phase == v1alpha1.PhaseProcessed
	}, "not processed with --context local")
	live.stop(t)

	// A context that does not exist is a configuration error: exit 1, clearly.
	missing := startBinary(t, []string{"KUBECONFIG=" + path}, "--context", "nope")
	<-missing.done
	if code := missing.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(missing.output(), `nope\" does not exist`) {
		t.Fatalf("exit %d, output:\n%s", code, missing.output())
	}
}

func TestBinaryRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--workers", "0"}, {"--page-size", "-1"}, {"--no-such-flag"}, {"--min-watch-timeout", "0s"}, {"--watch-silence-limit", "0s"},
		{"--leader-elect", "--serviceaccount-dir", t.TempDir()},                                             // outside a pod the Lease's namespace must be given
		{"--leader-elect", "--leader-elect-resource-namespace", "x", "--leader-elect-lease-duration", "5s"}, // not above the 10s renew deadline
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if code := exitCode(err); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// waitLog waits until the binary's output matches re and returns the first
// match's submatches.
func (p *proc) waitLog(t *testing.T, timeout time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	testkit.Eventually(t, timeout, func() bool {
		m = re.FindStringSubmatch(p.output())
		return m != nil
	}, "no log line matching %s", re)
	return m
}

var servingRE = regexp.MustCompile(`"Serving ([^"]*)" address="([^"]+)"`)

// addresses returns the base URLs the binary serves metrics and probes on
// (started with --metrics-bind-address and --health-probe-bind-address 127.0.0.1:0).
func (p *proc) addresses(t *testing.T) (metrics, probes string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		metrics, probes = "", ""
		for _, m := range servingRE.FindAllStringSubmatch(p.output(), -1) {
			if strings.Contains(m[1], "metrics") {
				metrics = m[2]
			}
			if strings.Contains(m[1], "probes") {
				probes = m[2]
			}
		}
		return metrics != "" && probes != ""
	}, "the binary did not say where it serves metrics and probes")
	return metrics, probes
}
