//go:build !linux

package main

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; children are
// stopped by the normal cleanup.
func sysProcAttr() *syscall.SysProcAttr { return nil }
