package clientconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// hermetic points every kubeconfig source at nothing: no $KUBECONFIG, no
// ~/.kube/config, no in-cluster environment.
func hermetic(t *testing.T) {
	home := clientcmd.RecommendedHomeFile
	clientcmd.RecommendedHomeFile = filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Cleanup(func() { clientcmd.RecommendedHomeFile = home })
	for _, env := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"} {
		t.Setenv(env, "")
	}
}

// serviceAccountDir writes what the kubelet mounts into a pod.
func serviceAccountDir(t *testing.T) string {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"token":     "sa-token",
		"ca.crt":    string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		"namespace": "rawwatch-system\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestInClusterWhenNoKubeconfig(t *testing.T) {
	hermetic(t)
	dir := serviceAccountDir(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	cfg, src, err := Load(Options{ServiceAccountDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if src != FromInCluster || cfg.Host != "https://[fd00::1]:443" || cfg.BearerToken != "sa-token" ||
		cfg.BearerTokenFile != filepath.Join(dir, "token") || cfg.CAFile != filepath.Join(dir, "ca.crt") {
		t.Fatalf("got %s %+v", src, cfg)
	}
	// --master overrides the in-cluster address, as kubectl's does.
	if cfg, _, _ := Load(Options{ServiceAccountDir: dir, Master: "https://10.0.0.1:6443"}); cfg.Host != "https://10.0.0.1:6443" {
		t.Errorf("--master ignored in-cluster: %s", cfg.Host)
	}
	if ns, err := Namespace(dir); ns != "rawwatch-system" || err != nil {
		t.Errorf("Namespace = %q, %v", ns, err)
	}
	t.Setenv("POD_NAMESPACE", "from-downward-api")
	if ns, _ := Namespace(dir); ns != "from-downward-api" {
		t.Errorf("$POD_NAMESPACE not preferred: %q", ns)
	}
}

// A kubeconfig, when there is one, wins over the in-cluster environment.
func TestKubeconfigWinsOverInCluster(t *testing.T) {
	hermetic(t)
	dir := serviceAccountDir(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "user-token"}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"--kubeconfig": {Kubeconfig: path, ServiceAccountDir: dir},
		"$KUBECONFIG":  {ServiceAccountDir: dir},
	} {
		if name == "$KUBECONFIG" {
			t.Setenv("KUBECONFIG", path)
		}
		cfg, src, err := Load(o)
		if err != nil || src != FromKubeconfig || cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "user-token" {
			t.Errorf("%s: %s %+v %v", name, src, cfg, err)
		}
	}
	// A broken kubeconfig is an error, not a reason to fall back.
	if _, _, err := Load(Options{Kubeconfig: path, Context: "nope", ServiceAccountDir: dir}); err == nil || !strings.Contains(err.Error(), `"nope" does not exist`) {
		t.Errorf("missing context: %v", err)
	}
}

func TestNeitherKubeconfigNorCluster(t *testing.T) {
	hermetic(t)
	dir := t.TempDir()
	_, _, err := Load(Options{ServiceAccountDir: dir})
	if err == nil || !strings.Contains(err.Error(), "no kubeconfig") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v", err)
	}
	// In-cluster environment but an unreadable CA: say so, do not go on without it.
	sa := serviceAccountDir(t)
	os.WriteFile(filepath.Join(sa, "ca.crt"), []byte("garbage"), 0o600)
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	if _, _, err := Load(Options{ServiceAccountDir: sa}); err == nil || !strings.Contains(err.Error(), "cluster CA") {
		t.Fatalf("bad CA: %v", err)
	}
	if _, err := Namespace(dir); err == nil {
		t.Error("Namespace outside a pod: no error")
	}
}
