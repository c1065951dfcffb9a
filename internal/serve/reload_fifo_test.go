//go:build unix

package serve

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/costguard/costguard/middleware"
)

// A configuration path replaced by a named pipe, then SIGHUP: the reload
// is refused at once with a log line (it does not wait for a writer), and
// a regular file put back is reloaded, so later reloads still work.
func TestReloadRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "costguard.yaml")
	writeConfig(t, path, reloadFirst)
	reload := make(chan os.Signal)
	srv := startRunReloading(t, reload, "-addr", "127.0.0.1:0", "-config", path)

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Rename(fifo, path))
	// Should a reload wait in open for a writer, give it one when the test
	// ends, so that the server can stop.
	t.Cleanup(func() {
		if info, err := os.Lstat(path); err == nil && info.Mode()&os.ModeNamedPipe != 0 {
			if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
	})
	reload <- syscall.SIGHUP
	logs := srv.stderr.waitFor(t, refusedLine, 1)
	assert.Contains(t, logs, path+" is a named pipe, not a regular file")
	assert.NotContains(t, logs, reloadedLine)

	next := filepath.Join(dir, "next.yaml")
	writeConfig(t, next, reloadSecond)
	require.NoError(t, os.Rename(next, path))
	reload <- syscall.SIGHUP
	srv.stderr.waitFor(t, reloadedLine, 1)
	resp, _ := call(t, "GET", srv.url+"/api/users/octocat", "new-key", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "50", resp.Header.Get(middleware.HeaderXRateLimitLimit), "the file put back is in force")
}

// Only a regular file, or a link to one, is read as the configuration.
func TestLoadConfigRegularFileOnly(t *testing.T) {
	dir := t.TempDir()
	_, err := loadConfig(dir)
	assert.ErrorIs(t, err, errConfig)
	assert.ErrorContains(t, err, dir+" is a directory, not a regular file")
	_, err = loadConfig(os.DevNull)
	assert.ErrorContains(t, err, os.DevNull+" is a device, not a regular file")

	file, link := filepath.Join(dir, "costguard.yaml"), filepath.Join(dir, "link.yaml")
	writeConfig(t, file, reloadSecond)
	require.NoError(t, os.Symlink(file, link))
	cfg, err := loadConfig(link)
	require.NoError(t, err)
	assert.EqualValues(t, 50, cfg.Plans["free"].Burst)
}
