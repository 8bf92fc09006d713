//go:build !linux

package testserver

import "syscall"

// sysProcAttr puts the server in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
