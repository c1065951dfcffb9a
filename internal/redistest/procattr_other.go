//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; cleanup relies on
// Close and Main.
func sysProcAttr() *syscall.SysProcAttr { return nil }
