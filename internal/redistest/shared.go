package redistest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared holds the per-package servers started lazily by SharedServer and
// SharedCluster and removed by Main.
var shared struct {
	mu      sync.Mutex
	mainRun bool // Main is running the tests, so someone will clean up
	closed  bool

	server     *Server
	serverErr  error
	cluster    *Cluster
	clusterErr error
}

// Main runs the package's tests and then removes the shared servers. Call it
// from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// When TestMain returns, the testing package exits with m.Run's status.
func Main(m *testing.M) {
	shared.mu.Lock()
	shared.mainRun = true
	shared.mu.Unlock()

	m.Run()

	if err := closeShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// closeShared stops the shared servers; later Shared* calls fail.
func closeShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.closed = true
	var err error
	if shared.server != nil {
		err = errors.Join(err, shared.server.Close())
	}
	if shared.cluster != nil {
		err = errors.Join(err, shared.cluster.Close())
	}
	shared.server, shared.cluster = nil, nil
	return err
}

// sharedUsable fails tb unless Main is in charge of cleaning up.
func sharedUsable(tb testing.TB) {
	tb.Helper()
	if !shared.mainRun {
		tb.Fatal("redistest: shared servers need the package's TestMain to call redistest.Main(m)")
	}
	if shared.closed {
		tb.Fatal("redistest: shared servers already removed")
	}
}

// SharedServer returns the package's standalone server, starting it on first
// use. A failed start is reported to every caller. Do not Stop or Restart it.
func SharedServer(tb testing.TB) *Server {
	tb.Helper()
	requireBinaries(tb, serverBinary)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	sharedUsable(tb)
	if shared.server == nil && shared.serverErr == nil {
		shared.server, shared.serverErr = newServer(false)
	}
	if shared.serverErr != nil {
		tb.Fatal(shared.serverErr)
	}
	return shared.server
}

// SharedCluster returns the package's three-master Cluster, starting it on
// first use. A failed start is reported to every caller.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	requireBinaries(tb, serverBinary, cliBinary)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	sharedUsable(tb)
	if shared.cluster == nil && shared.clusterErr == nil {
		shared.cluster, shared.clusterErr = newCluster()
	}
	if shared.clusterErr != nil {
		tb.Fatal(shared.clusterErr)
	}
	return shared.cluster
}
