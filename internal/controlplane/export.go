package controlplane

import (
	"context"
	"time"
)

// Process is a program started by StartProcess, its output in DIR/NAME.log:
// what the control plane runs its own children with, for packages that run
// more of a cluster beside it (internal/node).
type Process struct{ p *process }

// StartProcess starts path with args; its output goes to dir/name.log, and
// it is killed if this process dies.
func StartProcess(dir, name, path string, args ...string) (*Process, error) {
	p, err := startProcess(dir, name, path, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p}, nil
}

// Stop ends the process with SIGTERM, killing it after 10 s.
func (p *Process) Stop() { p.p.stop() }

// Kill ends the process at once.
func (p *Process) Kill() { p.p.kill() }

// Exited is the exit error once the process has ended, nil while it runs.
func (p *Process) Exited() error { return p.p.exited() }

// WaitFor polls ready until it returns true, the process dies, or timeout.
func (p *Process) WaitFor(ctx context.Context, timeout time.Duration, ready func() bool) error {
	return waitFor(ctx, p.p, timeout, ready)
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }
