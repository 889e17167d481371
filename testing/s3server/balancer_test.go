package s3server

import (
	"io"
	"net"
	"strings"
	"testing"
)

// TestBalancerRotation: connections go round robin to the nodes in
// rotation only; with none, a connection closes with no byte.
func TestBalancerRotation(t *testing.T) {
	var addrs []string
	for _, name := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte(name))
				c.Close()
			}
		}()
		addrs = append(addrs, ln.Addr().String())
	}
	b, err := newBalancer(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	answers := func(n int) string {
		var out strings.Builder
		for range n {
			c, err := net.Dial("tcp", strings.TrimPrefix(b.endpoint(), "http://"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(c)
			c.Close()
			out.Write(got)
			if len(got) == 0 {
				out.WriteByte('-')
			}
		}
		return out.String()
	}
	if got := answers(4); got != "abab" {
		t.Errorf("both nodes in rotation: %q, want abab", got)
	}
	b.leave(0)
	if got := answers(3); got != "bbb" {
		t.Errorf("node 0 out of rotation: %q, want bbb", got)
	}
	b.leave(1)
	if got := answers(2); got != "--" {
		t.Errorf("no node in rotation: %q, want two closed connections", got)
	}
	b.join(0)
	if got := answers(2); got != "aa" {
		t.Errorf("node 0 back alone: %q, want aa", got)
	}
}
