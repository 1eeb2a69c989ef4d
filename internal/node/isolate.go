package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The node's own network: a namespace whose loopback holds the node's
// address too, with no way out (its default route is a blackhole), so that
// nothing sent in it can leave the machine. Pods get addresses of
// PodCIDR on a bridge in it; Services are ServiceCIDR (internal/controlplane's
// --service-cluster-ip-range), routed by kube-proxy's rules in it.
const (
	NodeIP   = "10.89.0.1"
	PodCIDR  = "10.88.0.0/16"
	NodeName = "rawwatch-node"
)

// envIsolated names, in the re-run program, the namespace it runs in, its
// state directory and the sysctls to leave as they were.
const envIsolated = "RAWWATCH_NODE_ISOLATED"

// Isolated reports whether this process is the one Isolate re-ran inside the
// node's network namespace, and the name of that namespace.
func Isolated() (name string, ok bool) {
	v := os.Getenv(envIsolated)
	return v, v != ""
}

// Isolate runs this program again (same arguments) inside a network
// namespace and cgroups of its own, named name, and, when that ends, tears
// down everything the node left: processes (containers, shims), mounts
// under dir, the cgroups, the namespace, the kubelet's log links, and the
// host sysctls the kubelet changes. It returns the re-run program's exit
// code. The re-run program sees Isolated() true and calls Start.
func Isolate(name, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := teardownStale(filepath.Dir(dir)); err != nil {
		return 0, err
	}
	saved, err := readSysctls()
	if err != nil {
		return 0, err
	}
	absent := absentHostDirs()
	cleanup := func() error { return teardown(name, dir, saved, absent) }
	if err := setupNetwork(name); err != nil {
		return 0, errors.Join(err, cleanup())
	}
	if err := makeCgroups(name); err != nil {
		return 0, errors.Join(err, cleanup())
	}
	self, err := os.Executable()
	if err != nil {
		return 0, errors.Join(err, cleanup())
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath(name), "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envIsolated+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, errors.Join(err, cleanup())
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return 1, errors.Join(err, cleanup())
		}
		code = exit.ExitCode()
		if code < 0 {
			code = 1
		}
	}
	return code, cleanup()
}

func netnsPath(name string) string { return filepath.Join("/run/netns", name) }

func setupNetwork(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", NodeIP + "/32", "dev", "lo"},
		{"route", "add", "blackhole", "default"},
	} {
		if err := run("ip", append([]string{"-n", name}, args...)...); err != nil {
			return err
		}
	}
	return nil
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Name is the name of a node run by process pid: its network namespace,
// cgroups and directory (under out/node) carry it.
func Name(pid int) string { return fmt.Sprintf("%s-%d", namePrefix, pid) }

const namePrefix = "rawwatch-node"

// teardownStale tears down the nodes whose process is gone without its
// teardown (killed): each left a network namespace named by its pid. Then
// it removes the directories (logs) of earlier nodes under parent: a node's
// logs stay until the next one starts.
func teardownStale(parent string) error {
	var errs []error
	for _, dir := range []string{"/run/netns", parent} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), namePrefix+"-"))
			if err != nil || !strings.HasPrefix(e.Name(), namePrefix+"-") || syscall.Kill(pid, 0) == nil {
				continue
			}
			if dir == parent {
				errs = append(errs, os.RemoveAll(filepath.Join(parent, e.Name())))
			} else if err := teardown(e.Name(), filepath.Join(parent, e.Name()), nil, nil); err != nil {
				errs = append(errs, fmt.Errorf("tearing down the stale %s: %w", e.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
