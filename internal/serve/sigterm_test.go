//go:build unix

package serve

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSIGTERM runs the server as its own process and sends it SIGTERM, as
// an orchestrator stopping a pod does, while a slow request is in flight:
// the listener closes at once, the request finishes with its refund, and
// the process exits 0.
func TestSIGTERM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "costguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte("demo_latency: 500ms\n"), 0o600))
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-config", path)
	cmd.Env = append(os.Environ(), envServeMain+"=1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	first, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr.String())
	m := startLine.FindStringSubmatch(strings.TrimSuffix(first, "\n"))
	require.NotNil(t, m, "unexpected first line %q", first)
	url := m[1]
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	client := &http.Client{Transport: &http.Transport{}, Timeout: waitLimit}
	defer client.CloseIdleConnections()
	post := func(header http.Header) (int, gqlResponse, error) {
		body, _ := json.Marshal(map[string]string{"query": readmeQuery})
		req, _ := http.NewRequest(http.MethodPost, url+"/graphql", strings.NewReader(string(body)))
		req.Header = header
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+demoAPIKey)
		resp, err := client.Do(req)
		if err != nil {
			return 0, gqlResponse{}, err
		}
		defer resp.Body.Close()
		var r gqlResponse
		err = json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r, err
	}
	type answer struct {
		status int
		resp   gqlResponse
		err    error
		at     time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		status, r, err := post(http.Header{})
		answered <- answer{status, r, err, time.Now()}
	}()
	// The slow request is in flight once its 61 points are debited: a
	// price-only request (GraphQL-Cost: validate, which debits nothing)
	// then sees the bucket at 5000 - 61 while the resolvers sleep.
	require.Eventually(t, func() bool {
		status, r, err := post(http.Header{"Graphql-Cost": {"validate"}})
		return err == nil && status == http.StatusOK && r.Extensions.Cost != nil &&
			r.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != nil &&
			*r.Extensions.Cost.ThrottleStatus.CurrentlyAvailable == 5000-61
	}, waitLimit, time.Millisecond, "the slow request was never debited")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	refusedAt := waitRefused(t, url)

	a := <-answered
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status)
	assert.True(t, refusedAt.Before(a.at), "a new connection was accepted until the slow request had finished")
	require.NotNil(t, a.resp.Extensions.Cost.ActualQueryCost)
	assert.EqualValues(t, 14, *a.resp.Extensions.Cost.ActualQueryCost, "the in-flight request was priced and refunded")

	select {
	case err := <-exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("the server exited with %v; stderr:\n%s", err, stderr.String())
		}
		require.NoError(t, err)
		exited <- nil // for Cleanup
	case <-time.After(waitLimit):
		t.Fatalf("the server did not exit after SIGTERM; stderr:\n%s", stderr.String())
	}
}
