// Package clientconfig finds the API server and the credentials to reach it,
// by kubectl's rules: --kubeconfig, then $KUBECONFIG, then ~/.kube/config,
// then — when none of them exists — the in-cluster service account.
//
// In a pod, the kubelet mounts the pod's ServiceAccount token, the cluster's
// CA certificate and the namespace into /var/run/secrets/kubernetes.io/serviceaccount,
// and sets KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT. client-go's
// rest.InClusterConfig reads exactly those, from that fixed directory.
// InCluster does the same from a directory you choose (rawwatch
// --serviceaccount-dir; the default is the standard one), so that the path a
// pod takes can be exercised for real outside a pod: the tests write a token
// from the TokenRequest API, the CA and the namespace into a temp dir and run
// the binary against the local apiserver with it.
//
// Like client-go, the token is read again from its file as it changes
// (BearerTokenFile): the kubelet rotates projected tokens, typically hourly.
package clientconfig

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// DefaultServiceAccountDir is where the kubelet mounts a pod's service account.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Options are kubectl's flags, and the service-account directory.
type Options struct {
	Kubeconfig, Context, Master string
	// ServiceAccountDir holds token, ca.crt and namespace in a pod
	// (default DefaultServiceAccountDir).
	ServiceAccountDir string
}

// Source says where a configuration came from.
type Source string

const (
	FromKubeconfig Source = "kubeconfig"
	FromInCluster  Source = "in-cluster"
)

func (o Options) dir() string {
	if o.ServiceAccountDir == "" {
		return DefaultServiceAccountDir
	}
	return o.ServiceAccountDir
}

// Load returns the client configuration the options lead to, and its source.
// The order is clientcmd's own (its DeferredLoadingClientConfig), with the
// in-cluster step reading from ServiceAccountDir.
func Load(o Options) (*rest.Config, Source, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	overrides.ClusterInfo.Server = o.Master
	merged, err := rules.Load()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*merged, o.Context, overrides, rules).ClientConfig()
	switch {
	case err != nil && !clientcmd.IsEmptyConfig(err):
		return nil, "", fmt.Errorf("loading client configuration: %w", err)
	case err == nil && !rules.IsDefaultConfig(cfg):
		return cfg, FromKubeconfig, nil
	}
	// No kubeconfig anywhere: are we in a pod?
	if !InClusterPossible(o.dir()) {
		return nil, "", fmt.Errorf("no client configuration: no kubeconfig (--kubeconfig, $KUBECONFIG, %s) and not in a cluster "+
			"(KUBERNETES_SERVICE_HOST/PORT unset or no token in %s)", clientcmd.RecommendedHomeFile, o.dir())
	}
	cfg, err = InCluster(o.dir())
	if err != nil {
		return nil, "", err
	}
	if o.Master != "" {
		cfg.Host = o.Master
	}
	return cfg, FromInCluster, nil
}

// InClusterPossible reports whether the in-cluster environment is there:
// the service host and port, and a token file in dir.
func InClusterPossible(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "token"))
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != "" &&
		err == nil && !fi.IsDir()
}

// InCluster is rest.InClusterConfig reading the service account from dir:
// the API server at https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// the token in dir/token (re-read as it rotates), the CA in dir/ca.crt.
func InCluster(dir string) (*rest.Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, rest.ErrNotInCluster
	}
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("in-cluster configuration: reading the service account token: %w", err)
	}
	// client-go only logs a bad CA and goes on with the system's roots, which
	// then fails with an x509 error far from its cause; say it here instead.
	if _, err := certutil.NewPool(caFile); err != nil {
		return nil, fmt.Errorf("in-cluster configuration: reading the cluster CA: %w", err)
	}
	return &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		TLSClientConfig: rest.TLSClientConfig{CAFile: caFile},
		BearerToken:     string(token),
		BearerTokenFile: tokenFile,
	}, nil
}

// Namespace is the namespace this pod runs in: $POD_NAMESPACE (set through
// the downward API), else dir/namespace, as clientcmd reads it.
func Namespace(dir string) (string, error) {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	if dir == "" {
		dir = DefaultServiceAccountDir
	}
	data, err := os.ReadFile(filepath.Join(dir, "namespace"))
	if err != nil {
		return "", fmt.Errorf("not running in a pod (no $POD_NAMESPACE, %w)", err)
	}
	ns := strings.TrimSpace(string(data))
	if ns == "" {
		return "", errors.New("the service account's namespace file is empty")
	}
	return ns, nil
}
