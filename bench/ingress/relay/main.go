// Command relay is the ingress benchmark's peer: a plain user-space TCP
// relay (accept, dial, copy both ways with half-close), the least any
// relay does, with no policy, budget or receipt.
//
//	relay LISTEN TARGET
package main

import (
	"io"
	"log"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: relay LISTEN TARGET")
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", os.Args[2])
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{})
			go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); close(done) }()
			io.Copy(c, u)
			<-done
		}()
	}
}
