package unique

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the test process ends, however it
// ends (a panic skips TestMain's cleanup, and a server left running would hold the test's
// output open, so `go test` would never return).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
