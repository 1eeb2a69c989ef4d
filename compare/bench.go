package compare

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rawwatch/client"
	"rawwatch/internal/controlplane"
)

// bench is what a comparison run (harness) and a storm share: progress
// lines timed from their start, and the cluster they run on, a local
// control plane they start or the kubeconfig's, with a namespace of their
// own in it.
type bench struct {
	progress   io.Writer
	start      time.Time
	cp         *controlplane.ControlPlane
	kubeconfig string
	kube       kubernetes.Interface
	client     *client.Client // MyResources, unthrottled
	namespace  string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "%6.1fs  "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

// connect reaches kubeconfig's cluster or, for "", a control plane it
// starts (serving CBOR too where cbor is set), and creates the namespace
// there. The config it returns is unthrottled: the load generator paces
// itself.
func (b *bench) connect(ctx context.Context, kubeconfig string, cbor bool, namespace string) (*rest.Config, error) {
	if kubeconfig == "" {
		b.logf("starting a local control plane")
		cp, err := controlplane.Start(ctx, controlplane.Options{Logf: b.logf, CBOR: cbor})
		if err != nil {
			return nil, err
		}
		b.cp, kubeconfig = cp, cp.Kubeconfig
	}
	b.kubeconfig = kubeconfig
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	if b.client, err = client.New(cfg); err != nil {
		return nil, err
	}
	b.kube = kubernetes.NewForConfigOrDie(cfg)
	b.namespace = namespace
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	return cfg, nil
}

// cleanup stops the control plane connect started, or deletes the
// namespace it created in the kubeconfig's cluster.
func (b *bench) cleanup() {
	if b.cp != nil {
		b.cp.Stop()
	} else if b.kube != nil && b.namespace != "" {
		_ = b.kube.CoreV1().Namespaces().Delete(context.Background(), b.namespace, metav1.DeleteOptions{})
	}
}
