//go:build linux

package main

import "syscall"

// sysProcAttr has the kernel SIGKILL a child (redis-server or a split-budget
// worker) if this process dies before its cleanup runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
