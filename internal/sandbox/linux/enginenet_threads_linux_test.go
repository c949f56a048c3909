package linux

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-project/cordon/internal/sandbox"
)

// threadsIn counts this process's threads whose network namespace is
// inode ino, read from /proc/self/task (from outside each goroutine).
func threadsIn(t *testing.T, ino uint64) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("list this process's threads: %v", err)
	}
	n := 0
	for _, p := range tasks {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Ino == ino {
			n++
		}
	}
	return n
}

// TestEngineNetThreads: the spawning thread that joins an engine's
// network namespace leaks it to no other goroutine. While the sandbox
// runs, exactly one thread of the provider's process is in the engine's
// namespace (the positive control: the scan sees it), and goroutines
// run meanwhile — half locked to a thread (which the runtime may start
// anew while the spawning thread is locked), half on the pool — each read
// their own thread's namespace and none is the engine's. Once the sandbox ends and
// is deprovisioned no thread is left in it.
func TestEngineNetThreads(t *testing.T) {
	p := newImageProvider(t)
	path, ino, _ := engineNetns(t)
	if n := threadsIn(t, ino); n != 0 {
		t.Fatalf("before the sandbox, %d threads already in the engine's namespace", n)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spec := imageSpec(imageRoot(t, ""), sandbox.Image{Writable: true}, "exec /bin/busybox sleep 600")
	spec.Level = sandbox.DedicatedRuntime
	spec.EngineNet = &sandbox.EngineNet{File: f, Path: path, Reason: "the test's acceptance"}
	ctx := context.Background()
	s, err := p.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	deprovisioned := false
	t.Cleanup(func() {
		if !deprovisioned {
			s.Deprovision(context.Background())
		}
	})
	if _, err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n := threadsIn(t, ino); n != 1 {
		t.Fatalf("while the sandbox runs, %d threads are in the engine's namespace, want 1 (the spawning thread)", n)
	}
	var wg sync.WaitGroup
	leaked := make(chan string, 256)
	for i := 0; i < 128; i++ {
		wg.Add(1)
		go func(lock bool) {
			defer wg.Done()
			if lock {
				// A thread of its own, possibly a new one.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			var st unix.Stat_t
			if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
				leaked <- err.Error()
			} else if st.Ino == ino {
				leaked <- "a goroutine ran in the engine's network namespace"
			}
		}(i%2 == 0)
	}
	wg.Wait()
	close(leaked)
	for l := range leaked {
		t.Error(l)
	}
	if err := s.Deprovision(ctx); err != nil {
		t.Fatal(err)
	}
	deprovisioned = true
	// The spawning goroutine returns after the init is gone, and the
	// runtime then ends its thread.
	for deadline := time.Now().Add(30 * time.Second); threadsIn(t, ino) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after Deprovision %d threads are still in the engine's namespace", threadsIn(t, ino))
		}
	}
}
