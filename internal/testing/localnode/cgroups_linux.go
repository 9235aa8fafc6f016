package localnode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupLayout is where this machine's cgroup hierarchies are mounted, read from
// /proc/self/mountinfo: v1 hierarchies by controller ("cpu", "memory", "freezer",
// "name=systemd", ...), and the cgroup2 tree, if any: the root of a pure v2 machine, or the
// "unified" tree of a v1/v2 hybrid, which has no controllers but does have cgroup.freeze and
// cgroup.kill.
//
// It is the base of a sandboxed node's cgroup root (/baton-node-<i> in every hierarchy), which
// the node's processes join and which freezing or killing ends as one. Nothing uses it until a
// node runs in a sandbox (issue 27, increment 1).
type cgroupLayout struct {
	v1 map[string]string // controller → mount point; co-mounted controllers share one
	v2 string            // the cgroup2 mount point, "" if none
}

// detectCgroups reads the cgroup mounts from mountinfo (the content of /proc/self/mountinfo). It
// assumes each hierarchy is mounted at its root, as on a host; inside a cgroup namespace or a
// container that bind-mounts a subtree, the paths it returns are not the kernel's.
// It returns an error if there is neither a cgroup2 tree nor a v1 freezer: no way to freeze a
// node's processes together.
func detectCgroups(mountinfo []byte) (cgroupLayout, error) {
	l := cgroupLayout{v1: map[string]string{}}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		before, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, tail := strings.Fields(before), strings.Fields(after)
		if len(f) < 5 || len(tail) < 3 {
			continue
		}
		point := unescapeMountPath(f[4])
		switch tail[0] {
		case "cgroup2":
			if l.v2 == "" {
				l.v2 = point
			}
		case "cgroup":
			for _, opt := range strings.Split(tail[2], ",") {
				if !v1Controller(opt) {
					continue
				}
				if _, seen := l.v1[opt]; !seen {
					l.v1[opt] = point
				}
			}
		}
	}
	if l.v2 == "" && l.v1["freezer"] == "" {
		return l, errors.New("localnode: neither a cgroup2 tree nor a v1 freezer is mounted: a node's processes cannot be frozen together")
	}
	return l, nil
}

// v1Controller reports whether a v1 cgroup mount's super option names a controller or a named
// hierarchy ("name=systemd") rather than a mount flag.
func v1Controller(opt string) bool {
	switch opt {
	case "", "rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods", "none":
		return false
	}
	return !strings.Contains(opt, "=") || strings.HasPrefix(opt, "name=")
}

// hierarchies returns every mount point, each once, the cgroup2 tree last.
func (l cgroupLayout) hierarchies() []string {
	var dirs []string
	for _, d := range l.v1 {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	if l.v2 != "" {
		dirs = append(dirs, l.v2)
	}
	return dirs
}

// pureV2 reports whether the cgroup2 tree is the only hierarchy (the kubelet then manages
// controllers there, and processes may sit only in leaves).
func (l cgroupLayout) pureV2() bool { return l.v2 != "" && len(l.v1) == 0 }

// create makes the cgroup name (a path relative to each hierarchy's root, "baton-node-1") and
// name/system, where a node's daemons go, in every hierarchy. In cpuset it copies cpuset.cpus and
// cpuset.mems from the parent into both (a v1 cpuset cgroup is created empty, and joining it
// fails with ENOSPC). On pure v2 it enables in name the controllers the root offers, so that the
// kubelet can use them below name. It leaves alone what exists already.
func (l cgroupLayout) create(name string) error {
	for _, h := range l.hierarchies() {
		for _, rel := range []string{name, filepath.Join(name, "system")} {
			dir := filepath.Join(h, rel)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("localnode: cgroup %s: %w", dir, err)
			}
			if h == l.v1["cpuset"] {
				for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
					if err := copyCgroupFile(filepath.Dir(dir), dir, file); err != nil {
						return err
					}
				}
			}
			if l.pureV2() && rel == name {
				if err := enableControllers(h, dir); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyCgroupFile(from, to, file string) error {
	v, err := os.ReadFile(filepath.Join(from, file))
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	if err := os.WriteFile(filepath.Join(to, file), bytes.TrimSpace(v), 0o644); err != nil {
		return fmt.Errorf("localnode: cgroup %s: %w", filepath.Join(to, file), err)
	}
	return nil
}

// enableControllers writes "+c" for every controller of root's cgroup.controllers to
// dir/cgroup.subtree_control.
func enableControllers(root, dir string) error {
	ctrls, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	var plus []string
	for _, c := range strings.Fields(string(ctrls)) {
		plus = append(plus, "+"+c)
	}
	if len(plus) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(plus, " ")), 0o644); err != nil {
		return fmt.Errorf("localnode: enabling %s in %s: %w", strings.Join(plus, " "), dir, err)
	}
	return nil
}

// joinFiles are the cgroup.procs files a daemon of the node writes its pid to before it execs:
// name/system in the freezer (v1) and the cgroup2 tree, which is what freeze and kill act on.
// The daemon keeps its other v1 cgroups (the kubelet puts pods in all of them itself).
func (l cgroupLayout) joinFiles(name string) []string {
	var files []string
	if f := l.v1["freezer"]; f != "" {
		files = append(files, filepath.Join(f, name, "system", "cgroup.procs"))
	}
	if l.v2 != "" {
		files = append(files, filepath.Join(l.v2, name, "system", "cgroup.procs"))
	}
	return files
}

// freeze freezes (on) or thaws the cgroup name and everything below it, and waits up to timeout
// until the kernel reports it done: the cgroup2 tree's cgroup.freeze and cgroup.events "frozen"
// if there is one, the v1 freezer's freezer.state otherwise. It does not guarantee that a
// process which joins name afterwards is frozen before it runs.
func (l cgroupLayout) freeze(name string, on bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if l.v2 != "" {
		dir := filepath.Join(l.v2, name)
		want := map[bool]string{true: "1", false: "0"}[on]
		if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(want), 0o644); err != nil {
			return fmt.Errorf("localnode: freezing %s: %w", dir, err)
		}
		for {
			events, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			if err != nil {
				return fmt.Errorf("localnode: %w", err)
			}
			if slices.Contains(strings.Split(string(events), "\n"), "frozen "+want) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("localnode: %s not frozen=%s within %s: %s", dir, want, timeout, bytes.TrimSpace(events))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	dir := filepath.Join(l.v1["freezer"], name)
	want := map[bool]string{true: "FROZEN", false: "THAWED"}[on]
	for {
		// v1: writing FROZEN starts freezing; the state reads FREEZING until every task stopped.
		if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(want), 0o644); err != nil {
			return fmt.Errorf("localnode: freezing %s: %w", dir, err)
		}
		state, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return fmt.Errorf("localnode: %w", err)
		}
		if strings.TrimSpace(string(state)) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localnode: %s is %s, not %s, after %s", dir, bytes.TrimSpace(state), want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill ends every process in the cgroup name and below, in every hierarchy, and waits up to
// timeout until none is left. With a cgroup2 tree it writes cgroup.kill (Linux 5.14+), which
// also reaches processes that fork meanwhile and frozen ones; otherwise, and for processes only
// in v1 hierarchies, it freezes, sends SIGKILL to each pid and thaws, so that none forks in
// between. It does not remove the cgroups (remove does).
func (l cgroupLayout) kill(name string, timeout time.Duration) error {
	killFile := ""
	if l.v2 != "" {
		killFile = filepath.Join(l.v2, name, "cgroup.kill")
		if _, err := os.Stat(killFile); err != nil {
			killFile = ""
		}
	}
	if killFile != "" {
		if err := os.WriteFile(killFile, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("localnode: %s: %w", killFile, err)
		}
	}
	// Without cgroup.kill, freeze first so that nothing forks between reading the pids and the
	// signals (a cgroup that cannot be frozen is killed as it is).
	frozen := killFile == "" && l.freeze(name, true, timeout) == nil
	for _, pid := range l.pids(name) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if frozen {
		// The v1 freezer delivers SIGKILL to frozen tasks only once they are thawed.
		if err := l.freeze(name, false, timeout); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		left := l.pids(name)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localnode: cgroup %s still has processes %v after %s", name, left, timeout)
		}
		for _, pid := range left { // forked after the first round (v1), or not yet gone
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pids lists the processes in the cgroup name and below, in every hierarchy, each once.
func (l cgroupLayout) pids(name string) []int {
	var pids []int
	for _, dir := range l.dirs(name) {
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(procs)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// dirs lists the cgroup directories of name and below in every hierarchy, parents before children.
func (l cgroupLayout) dirs(name string) []string {
	var dirs []string
	for _, h := range l.hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, name), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	return dirs
}

// remove removes the cgroup name and those below it in every hierarchy, children first, waiting
// up to timeout for the exit of processes that are still leaving. It fails if a process is left
// in one (kill first).
func (l cgroupLayout) remove(name string, timeout time.Duration) error {
	dirs := l.dirs(name)
	slices.Reverse(dirs)
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, dir := range dirs {
		if err := removeCgroupDir(dir, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// list returns the names of the cgroups directly below the hierarchies' roots that start with
// prefix, each once.
func (l cgroupLayout) list(prefix string) []string {
	var names []string
	for _, h := range l.hierarchies() {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names
}
