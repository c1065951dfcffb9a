//go:build linux

package redistest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL the server if the test binary dies
// before its cleanup runs (a -timeout panic, a kill), so no server outlives
// the tests that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
