package mem_test

import (
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) *objstore.Store {
		return objstore.New(mem.New(), "mem://test", objstore.Options{})
	}, objstoretest.Options{})
}

func TestConformanceBehindFaults(t *testing.T) {
	objstoretest.RunBehindFaults(t, func(t *testing.T) (objstore.Driver, string) {
		return mem.New(), "mem"
	}, objstoretest.Options{})
}
