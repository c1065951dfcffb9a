//go:build !linux

package pgtest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; cleanup relies on
// Close. Running as root is not handled there: PostgreSQL refuses it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr { return nil }
