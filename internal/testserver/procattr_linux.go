package testserver

import "syscall"

// sysProcAttr puts the server in its own process group (so Ctrl-C on the terminal reaches
// only the test process, which then stops its servers, and the group can be swept on stop)
// and asks the kernel to SIGKILL it if the thread that started it dies, so that a test
// binary killed by -timeout or a signal does not leave servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
