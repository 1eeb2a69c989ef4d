// Package controlplane runs a real Kubernetes control plane — etcd and
// kube-apiserver, nothing else — on loopback, for tests, the demo and the
// benchmarks. No kubelet, scheduler or controller-manager: a controller of
// custom resources needs none of them.
//
// Start generates what the apiserver needs (a serving certificate, a
// service-account signing key, a token file with an admin token), starts etcd
// on free ports, then kube-apiserver with RBAC on, waits for /readyz, installs
// the CRDs and writes a kubeconfig. More apiservers can share the etcd
// (AddAPIServer), e.g. one with its watch cache off, which is where real 410s
// from etcd compaction are seen.
//
// The binaries come from bin/ at the repository root; hack/ensure-tools.sh
// builds them there when missing (about 5 minutes for kube-apiserver).
package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configure Start. The zero value is a good default.
type Options struct {
	// BinDir holds etcd and kube-apiserver (default: bin/ at the repository root).
	BinDir string
	// Dir is where data, certificates and logs go (default: a new temp dir,
	// removed by Stop).
	Dir string
	// DisableWatchCache starts the apiserver with --watch-cache=false: every
	// LIST and WATCH goes to etcd, so a compacted resourceVersion gets 410.
	DisableWatchCache bool
	// APIServerArgs are extra kube-apiserver flags.
	APIServerArgs []string
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin on
	// (off by default: with no controller manager, no ServiceAccount would
	// exist for it to find): it gives each pod its ServiceAccount's
	// projected token, which a cluster with a kubelet needs (internal/node).
	ServiceAccountAdmission bool
	// NoShardSelectors starts the apiservers without the ShardedListAndWatch
	// feature gate (on by default): they drop LIST and WATCH's shardSelector
	// and send every object, as an older server would.
	NoShardSelectors bool
	// CBOR starts the apiservers with the CBORServingAndStorage feature gate
	// (KEP-4222, alpha, off by default): custom resources are then served as
	// CBOR to clients that ask for it (codec.WireCBOR). One more apiserver
	// with it: AddAPIServer(ctx, name, CBORGate).
	CBOR bool
	// CRDs are manifests to install (default: config/crd/*.yaml but its
	// kustomization.yaml).
	CRDs []string
	// Logf reports progress (optional).
	Logf func(format string, args ...any)
}

// CBORGate is the kube-apiserver flag that turns CBOR serving on (a later
// --feature-gates adds to an earlier one).
const CBORGate = "--feature-gates=CBORServingAndStorage=true"

// ControlPlane is a running etcd with one or more apiservers in front of it.
type ControlPlane struct {
	Dir     string
	EtcdURL string
	// APIServer is the first apiserver; Config and Kubeconfig point at it.
	APIServer *APIServer
	// Kubeconfig is the path of an admin kubeconfig for APIServer.
	Kubeconfig string
	// AdminToken is a bearer token in group system:masters.
	AdminToken string

	opts     Options
	root     string
	removes  bool
	certs    *certs
	etcd     *process
	etcdArgs []string

	mu         sync.Mutex
	apiservers []*APIServer
}

// APIServer is one kube-apiserver process.
type APIServer struct {
	Name string
	URL  string
	cp   *ControlPlane
	args []string
	proc *process
}

// Start brings up etcd and one apiserver and installs the CRDs.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(root, "bin")
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := ensureBinaries(root, opts); err != nil {
		return nil, err
	}
	cp = &ControlPlane{opts: opts, root: root, Dir: opts.Dir, AdminToken: randomToken()}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "rawwatch-cp-"); err != nil {
			return nil, err
		}
		cp.removes = true
	}
	started := cp // a failed Start returns nil: stop what it started
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if cp.certs, err = writeCerts(cp.Dir); err != nil {
		return nil, err
	}
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n", cp.AdminToken)
	if err := os.WriteFile(filepath.Join(cp.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	args := opts.APIServerArgs
	if opts.DisableWatchCache {
		args = append([]string{"--watch-cache=false"}, args...)
	}
	if cp.APIServer, err = cp.AddAPIServer(ctx, "apiserver", args...); err != nil {
		return nil, err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := cp.WriteKubeconfig(cp.Kubeconfig, cp.APIServer); err != nil {
		return nil, err
	}
	crds := opts.CRDs
	if crds == nil {
		if crds, err = filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml")); err != nil {
			return nil, err
		}
		crds = slices.DeleteFunc(crds, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	}
	if err := InstallCRDs(ctx, cp.APIServer.Config(), crds...); err != nil {
		return nil, err
	}
	opts.Logf("control plane ready: %s (etcd %s)", cp.APIServer.URL, cp.EtcdURL)
	return cp, nil
}

// Config is an admin rest.Config for the first apiserver.
func (cp *ControlPlane) Config() *rest.Config { return cp.APIServer.Config() }

// Config is an admin rest.Config for this apiserver.
func (a *APIServer) Config() *rest.Config {
	return &rest.Config{
		Host:            a.URL,
		BearerToken:     a.cp.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: a.cp.certs.caPEM},
		QPS:             -1, // tests and load generators are not to be slowed by client-side limits
	}
}

// ConfigWithToken is a rest.Config for this apiserver authenticating with token
// (e.g. a ServiceAccount token from the TokenRequest API).
func (a *APIServer) ConfigWithToken(token string) *rest.Config {
	c := a.Config()
	c.BearerToken = token
	return c
}

// CAFile is the path of the CA certificate that signed the serving certificate.
func (cp *ControlPlane) CAFile() string { return cp.certs.caFile }

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	client, peer := freePort(), freePort()
	if client == 0 || peer == 0 {
		return errors.New("no free port for etcd")
	}
	cp.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cp.etcdArgs = []string{"--name", "default",
		"--data-dir", cp.etcdData(),
		"--listen-client-urls", cp.EtcdURL, "--advertise-client-urls", cp.EtcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default=" + peerURL,
		"--unsafe-no-fsync", // test data: durability is not the point, speed is
		"--log-level", "warn"}
	return cp.runEtcd(ctx)
}

func (cp *ControlPlane) etcdData() string { return filepath.Join(cp.Dir, "etcd-data") }

// runEtcd starts etcd with the arguments of its first start (same ports and
// data directory) and waits until it is healthy.
func (cp *ControlPlane) runEtcd(ctx context.Context) (err error) {
	cp.etcd, err = startProcess(cp.Dir, "etcd", filepath.Join(cp.opts.BinDir, "etcd"), cp.etcdArgs...)
	if err != nil {
		return err
	}
	return waitFor(ctx, cp.etcd, 30*time.Second, func() bool {
		resp, err := http.Get(cp.EtcdURL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// AddAPIServer starts another kube-apiserver on the same etcd, with extra
// flags (e.g. "--watch-cache=false"), and waits until it is ready.
func (cp *ControlPlane) AddAPIServer(ctx context.Context, name string, extraArgs ...string) (*APIServer, error) {
	port := freePort()
	if port == 0 {
		return nil, errors.New("no free port for kube-apiserver")
	}
	a := &APIServer{Name: name, cp: cp, URL: fmt.Sprintf("https://127.0.0.1:%d", port)}
	a.args = append([]string{
		"--etcd-servers", cp.EtcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--tls-cert-file", cp.certs.servingCert, "--tls-private-key-file", cp.certs.servingKey,
		"--token-auth-file", filepath.Join(cp.Dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", cp.certs.saPub,
		"--service-account-signing-key-file", cp.certs.saKey,
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", disabledAdmission(cp.opts.ServiceAccountAdmission),
		"--profiling=false",
		// Server-side shard selectors (KEP-5866, alpha): package shard.
		// CBOR (KEP-4222, alpha): Options.CBOR.
		"--feature-gates=ShardedListAndWatch=" + strconv.FormatBool(!cp.opts.NoShardSelectors) +
			",CBORServingAndStorage=" + strconv.FormatBool(cp.opts.CBOR),
	}, extraArgs...)
	if err := a.start(ctx); err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.apiservers = append(cp.apiservers, a)
	cp.mu.Unlock()
	return a, nil
}

// disabledAdmission is the --disable-admission-plugins list (a repeated
// flag adds to it: it cannot be emptied by APIServerArgs).
func disabledAdmission(serviceAccounts bool) string {
	if serviceAccounts {
		return ""
	}
	return "ServiceAccount"
}

func (a *APIServer) start(ctx context.Context) error {
	proc, err := startProcess(a.cp.Dir, a.Name, filepath.Join(a.cp.opts.BinDir, "kube-apiserver"), a.args...)
	if err != nil {
		return err
	}
	a.proc = proc
	httpc, err := rest.HTTPClientFor(a.Config())
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, 90*time.Second, func() bool {
		resp, err := httpc.Get(a.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// Stop kills the apiserver process (as abruptly as a crash would).
func (a *APIServer) Stop() { a.proc.kill() }

// PID is the process id of the running kube-apiserver, 0 if none runs: its
// memory can be read from /proc, whether or not it answers requests.
func (a *APIServer) PID() int {
	if a.proc == nil || a.proc.exited() != nil {
		return 0
	}
	return a.proc.cmd.Process.Pid
}

// Restart kills the apiserver and starts it again with the same flags and
// port, waiting until it is ready: clients see their connections drop and
// their watches end, as in a real apiserver restart or upgrade.
func (a *APIServer) Restart(ctx context.Context) error {
	a.proc.kill()
	return a.start(ctx)
}

// Snapshot copies etcd's data, as an etcd snapshot would hold it, and
// returns the copy's directory: etcd is killed, copied, and started again on
// the same ports (apiservers retry through the gap). Killed, as a crash
// would end it: every write it acknowledged is in its WAL, which it replays
// when started on the copy; a clean stop waits out its request timeout (7 s)
// for the apiservers' open watch streams, and copies nothing more.
func (cp *ControlPlane) Snapshot(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp(cp.Dir, "snapshot-")
	if err != nil {
		return "", err
	}
	cp.etcd.kill()
	if err := os.CopyFS(filepath.Join(dir, "etcd-data"), os.DirFS(cp.etcdData())); err != nil {
		return "", err
	}
	return dir, cp.runEtcd(ctx)
}

// Restore puts a Snapshot back, the way an operator restores a cluster from
// a backup without etcdutl's --bump-revision: every apiserver and etcd stop,
// etcd's data is replaced by the snapshot's, and all start again on the same
// ports. The resourceVersion goes back to the snapshot's: what a client saw
// after the snapshot is gone, and its resourceVersion is now "in the future".
func (cp *ControlPlane) Restore(ctx context.Context, snapshot string) error {
	cp.mu.Lock()
	apiservers := slices.Clone(cp.apiservers)
	cp.mu.Unlock()
	for _, a := range apiservers {
		a.Stop()
	}
	cp.etcd.stop()
	if err := os.RemoveAll(cp.etcdData()); err != nil {
		return err
	}
	if err := os.CopyFS(cp.etcdData(), os.DirFS(filepath.Join(snapshot, "etcd-data"))); err != nil {
		return err
	}
	if err := cp.runEtcd(ctx); err != nil {
		return err
	}
	for _, a := range apiservers {
		if err := a.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// WriteKubeconfig writes an admin kubeconfig for a to path.
func (cp *ControlPlane) WriteKubeconfig(path string, a *APIServer) error {
	return cp.WriteKubeconfigFor(path, a.URL, "")
}

// WriteKubeconfigFor writes to path a kubeconfig for server (one of the
// apiservers, or a FaultProxy in front of one) that authenticates with token
// ("" means the admin token).
func (cp *ControlPlane) WriteKubeconfigFor(path, server, token string) error {
	if token == "" {
		token = cp.AdminToken
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cp.certs.caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

// Stop kills every process and removes the temp dir Start made.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	servers := cp.apiservers
	cp.apiservers = nil
	cp.mu.Unlock()
	for _, a := range servers {
		a.proc.kill()
	}
	if cp.etcd != nil {
		cp.etcd.kill()
	}
	if cp.removes {
		os.RemoveAll(cp.Dir)
	}
}

// Revision is etcd's current revision: the resourceVersion of the latest write.
func (cp *ControlPlane) Revision(ctx context.Context) (int64, error) {
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := cp.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA==", "limit": 1}, &out); err != nil {
		return 0, err
	}
	return strconv.ParseInt(out.Header.Revision, 10, 64)
}

// Compact compacts etcd's history up to its current revision and returns that
// revision: every older resourceVersion is gone, and an apiserver without a
// watch cache answers a WATCH or paginated LIST from one with 410 Gone.
func (cp *ControlPlane) Compact(ctx context.Context) (int64, error) {
	rev, err := cp.Revision(ctx)
	if err != nil {
		return 0, err
	}
	return rev, cp.CompactTo(ctx, rev)
}

// CompactTo compacts etcd's history up to revision rev: every revision
// before rev is gone, rev itself stays.
func (cp *ControlPlane) CompactTo(ctx context.Context, rev int64) error {
	body := map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}
	return cp.etcdCall(ctx, "/v3/kv/compaction", body, nil)
}

// etcdCall posts to etcd's JSON gateway.
func (cp *ControlPlane) etcdCall(ctx context.Context, path string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.EtcdURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// RepoRoot finds the repository root (the directory holding hack/ensure-tools.sh)
// from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "ensure-tools.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (hack/ensure-tools.sh) above the working directory")
		}
		dir = parent
	}
}

// ensureBinaries builds etcd and kube-apiserver into BinDir when missing.
func ensureBinaries(root string, opts Options) error {
	var missing []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if opts.BinDir != filepath.Join(root, "bin") {
		return fmt.Errorf("%s missing from %s", strings.Join(missing, ", "), opts.BinDir)
	}
	opts.Logf("building %s (kube-apiserver takes about 5 minutes)", strings.Join(missing, ", "))
	return buildTools(root, missing...)
}

// Tool is the path of bin/NAME at the repository root (kubectl, etcd, ...),
// built by hack/ensure-tools.sh first if it is missing.
func Tool(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "bin", name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	return path, buildTools(root, name)
}

func buildTools(root string, names ...string) error {
	cmd := exec.Command(filepath.Join(root, "hack", "ensure-tools.sh"), names...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls ready until it returns true, the process dies, or timeout.
func waitFor(ctx context.Context, p *process, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		if err := p.exited(); err != nil {
			return fmt.Errorf("%s exited while starting: %w\n%s", p.name, err, p.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s\n%s", p.name, timeout, p.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
