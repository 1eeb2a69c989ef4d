package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mountinfo calls f with the fields of each line of this process's
// /proc/self/mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE
// SOURCE SUPEROPTS.
func mountinfo(f func(fields []string)) error {
	file, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 5 {
			f(fields)
		}
	}
	return sc.Err()
}

// cgroupMounts are the mount points of this machine's cgroup hierarchies,
// v1 controllers and the cgroup2 one alike.
func cgroupMounts() ([]string, error) {
	var mounts []string
	err := mountinfo(func(fields []string) {
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			return
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			mounts = append(mounts, fields[4])
		}
	})
	return mounts, err
}

// makeCgroups makes the cgroup name in every hierarchy: the kubelet's
// cgroupRoot, and where the node's processes run. A v1 cpuset cgroup starts
// with no CPUs: it gets its parent's.
func makeCgroups(name string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// joinCgroups moves this process into the cgroup name of every hierarchy;
// everything it starts from then on is there too (containerd's shims
// included, which outlive a killed containerd), so that teardown finds them.
func joinCgroups(name string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, m := range mounts {
		if err := os.WriteFile(filepath.Join(m, name, "cgroup.procs"), pid, 0o644); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", filepath.Join(m, name), err)
		}
	}
	return nil
}

// cgroupDirs are the directories of cgroup name and its descendants in
// every hierarchy, deepest first.
func cgroupDirs(name string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range mounts {
		root := filepath.Join(m, name)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs, nil
}

// killCgroups kills every process in cgroup name (but this one) until none
// is left, then removes the cgroups.
func killCgroups(name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		dirs, err := cgroupDirs(name)
		if err != nil {
			return err
		}
		left := 0
		for _, d := range dirs {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if pid > 0 && pid != os.Getpid() {
					left++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %d processes still alive after SIGKILL", name, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	dirs, err := cgroupDirs(name)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := removeCgroup(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup, retrying while the kernel still
// counts a killed process in it.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// mountsUnder are the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	var mounts []string
	err := mountinfo(func(fields []string) {
		if p := unescapeMount(fields[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			mounts = append(mounts, p)
		}
	})
	slices.SortFunc(mounts, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(mounts), err
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dir string) error {
	var errs []error
	for range 5 { // a mount can be stacked on another at the same point
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

// The host sysctls the kubelet sets when they differ from what it wants
// (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...):
// they are machine-wide, not per network namespace, so teardown puts back
// the values read before the node started.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func readSysctls() (map[string]string, error) {
	saved := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		saved[k] = strings.TrimSpace(string(b))
	}
	return saved, nil
}

func restoreSysctls(saved map[string]string) error {
	var errs []error
	for k, v := range saved {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// containerLogLinks is where the kubelet links each container's log, a
// fixed path whatever its podLogsDir.
const containerLogLinks = "/var/log/containers"

// removeLogLinks removes the kubelet's links into dir.
func removeLogLinks(dir string) error {
	entries, err := os.ReadDir(containerLogLinks)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, dir+"/") {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostDirs are the host's directories the node's programs write into
// whatever they are configured with: the kubelet's device-plugin socket
// (/var/lib/kubelet/device-plugins) and container log links, the
// containerd shims' sockets, libcni's cache of results. Those that did not
// exist before the node started are removed with it.
var hostDirs = []string{"/var/lib/kubelet", containerLogLinks, "/run/containerd", "/var/lib/cni"}

// absentHostDirs are the hostDirs that do not exist now.
func absentHostDirs() []string {
	var absent []string
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); os.IsNotExist(err) {
			absent = append(absent, d)
		}
	}
	return absent
}

// teardown removes what a node named name left, in the order that frees
// each thing before the next: its processes, its mounts under dir, its
// cgroups, its network namespace, its log links, its state (logs stay),
// the host directories in absent (made by the node); and it puts the host
// sysctls back to saved (nil: leave them).
func teardown(name, dir string, saved map[string]string, absent []string) error {
	var errs []error
	if err := killCgroups(name); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(netnsPath(name)); err == nil {
		if err := run("ip", "netns", "delete", name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeLogLinks(dir); err != nil {
		errs = append(errs, err)
	}
	for _, state := range []string{"containerd", "kubelet", "cp/etcd-data", "cni"} {
		if err := os.RemoveAll(filepath.Join(dir, state)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range absent {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if saved != nil {
		if err := restoreSysctls(saved); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
