package broker

import "testing"

// TestBodyClass: every size from just over keepBufferBytes to
// maxRequestBytes has a class in range whose size holds it with at most a
// quarter to spare, classes grow with the size, and a class's own size
// maps back to it (put finds the class get took the buffer from).
func TestBodyClass(t *testing.T) {
	prevClass, prevSize := -1, 0
	check := func(n int) {
		t.Helper()
		class, size := bodyClass(n)
		if class < 0 || class >= bodyClasses {
			t.Fatalf("bodyClass(%d) = class %d, outside [0, %d)", n, class, bodyClasses)
		}
		if size < n || 4*size > 5*n+4 {
			t.Fatalf("bodyClass(%d) = size %d: below n or over a quarter more", n, size)
		}
		if class < prevClass || (class == prevClass && size != prevSize) || (class > prevClass && size <= prevSize) {
			t.Fatalf("bodyClass(%d) = (%d, %d) after (%d, %d): not monotonic", n, class, size, prevClass, prevSize)
		}
		if c2, s2 := bodyClass(size); c2 != class || s2 != size {
			t.Fatalf("bodyClass(%d) = (%d, %d), but its size maps to (%d, %d)", n, class, size, c2, s2)
		}
		prevClass, prevSize = class, size
	}
	for n := keepBufferBytes + 1; n <= maxRequestBytes; n += 4093 {
		check(n)
	}
	check(maxRequestBytes)
}

// TestBodyPoolGetPut: get returns n bytes whatever the pool holds, at
// and below keepBufferBytes too; a buffer that is not a class's size is
// not kept.
func TestBodyPoolGetPut(t *testing.T) {
	var p bodyPool
	for _, n := range []int{1, keepBufferBytes, keepBufferBytes + 1, keepBufferBytes + 2, 3 << 20, 4<<20 + 17, maxRequestBytes} {
		b := p.get(n)
		if len(b) != n {
			t.Fatalf("get(%d): len %d", n, len(b))
		}
		p.put(b)
		if b2 := p.get(n - 1); len(b2) != n-1 {
			t.Fatalf("get(%d) after a put: len %d", n-1, len(b2))
		}
	}
	p.put(make([]byte, 0, 3<<20+1)) // no class's size: dropped
	if b := p.get(3<<20 + 1); len(b) != 3<<20+1 || cap(b) < 3<<20+1 {
		t.Fatalf("get after a foreign put: len %d cap %d", len(b), cap(b))
	}
}
