package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestZZCold(t *testing.T) {
	dir := os.Getenv("ZZ_DIR")
	if dir == "" {
		t.Skip()
	}
	a := time.Now()
	s, err := Open(dir, DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	b := time.Now()
	o, _ := Self()
	r := rec("x")
	r.Owner = o
	if _, err := s.Begin(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	c := time.Now()
	s.AddResource(context.Background(), "x", "/sys/fs/cgroup/x")
	s.SetState(context.Background(), "x", StateRunning)
	d := time.Now()
	if err := s.Finish(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	e := time.Now()
	s.Close()
	f := time.Now()
	fmt.Printf("open %v begin %v add+state %v finish %v close %v total %v\n", b.Sub(a), c.Sub(b), d.Sub(c), e.Sub(d), f.Sub(e), f.Sub(a))
}
