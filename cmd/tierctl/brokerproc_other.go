//go:build !linux

package main

import "syscall"

// brokerSysProcAttr: only Linux can tie the broker's life to tierctl's;
// elsewhere Stop is what ends it.
func brokerSysProcAttr() *syscall.SysProcAttr { return nil }
