// SPDX-License-Identifier: Apache-2.0

// The end-to-end test's pod image: a static binary with no dependencies.
//
//	e2e-server serve ADDR   answers every HTTP request with "pod NAME saw ADDRESS",
//	                        the client's address as the pod sees it
//	e2e-server get URL      prints the body of URL (name lookups through the
//	                        pod's resolv.conf), for checks run with kubectl exec
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: e2e-server serve ADDR | get URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		name, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "pod %s saw %s\n", name, r.RemoteAddr)
		})
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
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}
