package s3server

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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

// TestBalancerDrain: a drained node's quiet connection is closed, and one
// still moving bytes is kept until it goes quiet; the drain ends with
// none left, and the node takes no new connection meanwhile.
func TestBalancerDrain(t *testing.T) {
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
			go io.Copy(c, c) // echo
		}
	}()
	b, err := newBalancer([]string{ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", strings.TrimPrefix(b.endpoint(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	idle, busy := dial(), dial()
	defer idle.Close()
	defer busy.Close()
	// quiet is long beside busy's pace (every 10 ms), so that only a
	// stall of seconds could make busy look quiet.
	const quiet = 2 * time.Second
	stop := make(chan struct{})
	var talked atomic.Int64
	go func() { // busy keeps talking until stop
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := busy.Write([]byte("y")); err != nil {
				return
			}
			if _, err := io.ReadFull(busy, make([]byte, 1)); err != nil {
				return
			}
			talked.Add(1)
		}
	}()
	done := make(chan bool)
	go func() { done <- b.drain(context.Background(), 0, quiet) }()
	// The idle connection closes; the busy one goes on while it talks.
	idle.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the idle connection read %d bytes, %v: want it closed", n, err)
	}
	for before := talked.Load(); talked.Load() < before+20; {
		time.Sleep(10 * time.Millisecond)
		select {
		case <-done:
			t.Fatal("the drain ended while a connection was still talking")
		default:
		}
	}
	close(stop)
	if !<-done {
		t.Fatal("the drain did not finish")
	}
	busy.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := busy.Read(make([]byte, 1)); err == nil {
		t.Fatal("the busy connection is open after the drain")
	}
	b.mu.Lock()
	in := b.in[0]
	b.mu.Unlock()
	if in {
		t.Fatal("the drained node is in rotation")
	}
}
