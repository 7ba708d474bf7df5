// SPDX-License-Identifier: Apache-2.0

// The end-to-end test's pod image: a static binary with no dependencies.
//
//	e2e-server serve ADDR   answers every HTTP request with "pod NAME saw ADDRESS",
//	                        the client's address as the pod sees it, and every
//	                        UDP datagram to the same address the same way
//	e2e-server get URL      prints the body of URL (name lookups through the
//	                        pod's resolv.conf), for checks run with kubectl exec
//	e2e-server udp ADDR     sends one datagram to ADDR, prints the answer
//	e2e-server cat FILE     prints FILE (the node's routes, from a hostNetwork pod)
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: e2e-server serve ADDR | get URL | udp ADDR | cat FILE")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		name, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "pod %s saw %s\n", name, r.RemoteAddr)
		})
		udp, err := net.ListenPacket("udp", os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() {
			buf := make([]byte, 2048)
			for {
				_, from, err := udp.ReadFrom(buf)
				if err != nil {
					continue
				}
				udp.WriteTo([]byte(fmt.Sprintf("pod %s saw %s over udp\n", name, from)), from)
			}
		}()
		fmt.Fprintln(os.Stderr, http.ListenAndServe(os.Args[2], nil))
		os.Exit(1)
	case "get":
		client := http.Client{Timeout: 20 * time.Second}
		resp, err := client.Get(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(os.Stdout, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "status", resp.Status, err)
			os.Exit(1)
		}
	case "udp":
		conn, err := net.DialTimeout("udp", os.Args[2], 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer conn.Close()
		buf := make([]byte, 2048)
		// Datagrams may be lost: a few tries, each waiting a second.
		for try := 0; try < 5; try++ {
			conn.Write([]byte("hello"))
			conn.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := conn.Read(buf); err == nil {
				os.Stdout.Write(buf[:n])
				return
			}
		}
		fmt.Fprintln(os.Stderr, "no answer from", os.Args[2])
		os.Exit(1)
	case "cat":
		text, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(text)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
