//go:build !linux

package unique

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere TestMain's cleanup stops
// the server.
func dieWithParent(cmd *exec.Cmd) {}
