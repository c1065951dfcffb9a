//go:build linux

package pgtest

import "syscall"

// sysProcAttr runs the program as cred's user when set (the kernel sets
// the ids before the parent-death signal, which would otherwise be
// cleared), and asks for SIGQUIT, PostgreSQL's immediate shutdown, if the
// test binary dies before its cleanup runs, so no server outlives the
// tests that started it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
}
