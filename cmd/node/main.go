// Command node keeps a real single-node cluster running (make node) until
// interrupted, then tears it down: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy and a kubelet on
// containerd, in a network namespace of their own (package
// internal/node), with the images of bin/image imported.
//
// Its kubeconfig is out/node/kubeconfig; the apiserver is on loopback inside
// the node's namespace, so kubectl and make deploy run there too:
//
//	ip netns exec rawwatch-node-PID make deploy KUBECONFIG=out/node/kubeconfig IMG=rawwatch:TAG
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"rawwatch/internal/controlplane"
	"rawwatch/internal/node"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if reason := node.CannotStart(); reason != "" {
		return fmt.Errorf("cannot start here: %s", reason)
	}
	name, inside := node.Isolated()
	if !inside {
		name = node.Name(os.Getpid())
		code, err := node.Isolate(name, filepath.Join(root, "out", "node", name))
		if err != nil {
			return err
		}
		fmt.Printf("node: %s torn down\n", name)
		os.Exit(code)
	}
	images, err := filepath.Glob(filepath.Join(root, "bin", "image", "*.tar"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, node.Options{Name: name, Dir: filepath.Join(root, "out", "node", name), Images: images,
		Logf: func(f string, args ...any) { fmt.Printf(f+"\n", args...) }})
	if err != nil {
		return err
	}
	defer n.Stop()
	kubeconfig := filepath.Join(root, "out", "node", "kubeconfig")
	if err := n.WriteKubeconfig(kubeconfig, n.APIServer); err != nil {
		return err
	}
	fmt.Printf("node: %s is Ready (images: %d imported). In its network namespace:\n", node.NodeName, len(images))
	fmt.Printf("  ip netns exec %s bin/kubectl --kubeconfig %s get nodes\n", name, kubeconfig)
	fmt.Printf("  ip netns exec %s make deploy KUBECONFIG=%s IMG=rawwatch:TAG\n", name, kubeconfig)
	fmt.Println("node: Ctrl-C stops it and removes what it made")
	<-ctx.Done()
	return nil
}
