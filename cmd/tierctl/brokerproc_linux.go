package main

import "syscall"

// brokerSysProcAttr has the kernel send the demo's broker SIGTERM when
// tierctl dies without stopping it (a SIGKILL runs no defer). The kernel
// ties it to the OS thread that started the broker; Go ends a thread only
// when a goroutine locked to it returns, which tierctl's do not.
func brokerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
