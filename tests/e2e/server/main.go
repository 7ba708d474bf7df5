// SPDX-License-Identifier: Apache-2.0

// The end-to-end test's pod image: a static binary with no dependencies.
//
//	e2e-server serve ADDR   answers every HTTP request with "pod NAME saw ADDRESS",
//	                        the client's address as the pod sees it, and every
//	                        UDP datagram and SCTP association to the same
//	                        address the same way
//	e2e-server get URL      prints the body of URL (name lookups through the
//	                        pod's resolv.conf), for checks run with kubectl exec
//	e2e-server udp ADDR     sends one datagram to ADDR, prints the answer
//	e2e-server sctp ADDR    opens an SCTP association to ADDR, sends one message,
//	                        prints "connected to PEER: ANSWER"
//	e2e-server dial ADDR    opens a TCP connection to ADDR, prints "connected to
//	                        PEER" (the peer as getpeername reports it), or why not
//	e2e-server cat FILE     prints FILE (the node's routes, from a hostNetwork pod)
//	e2e-server ping ADDR    ICMPv6 echo to ADDR over an unprivileged ping socket
//	                        (the pod's ping_group_range), prints who answered
//	e2e-server links NAME   prints "NAME KIND gso_max_size gro_max_size" for the
//	                        pod's device NAME, from the kernel (rtnetlink)
//	e2e-server bench URL SECONDS [SOURCE]
//	                        GETs URL for SECONDS, each request on a new TCP
//	                        connection (from SOURCE, an address, if given), one
//	                        at a time; prints requests per second and the p50
//	                        and p99 latency (connect included)
//	e2e-server stream URL   reads URL's body (e.g. /zero/BYTES of a server) and
//	                        prints the bytes and the rate, discarding them
//	e2e-server hold ADDR COUNT SECONDS
//	                        opens COUNT connections to a server's /hold at ADDR
//	                        (which answers "pod NAME" and keeps the connection),
//	                        prints "holding COUNT", then after SECONDS each one's
//	                        fate: "connection N to pod NAME: open", or "...:
//	                        ended: ERROR" (how it ended: aborted, reset, closed)
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) != 3 && !(len(os.Args) >= 4 && len(os.Args) <= 5 && os.Args[1] == "bench") &&
		!(len(os.Args) == 5 && os.Args[1] == "hold") {
		fmt.Fprintln(os.Stderr, "usage: e2e-server serve ADDR | get URL | udp ADDR | sctp ADDR | dial ADDR | cat FILE | bench URL SECONDS | ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		name, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "pod %s saw %s\n", name, r.RemoteAddr)
		})
		http.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "pod %s\n", name)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		zeros := make([]byte, 1<<20)
		http.HandleFunc("/zero/", func(w http.ResponseWriter, r *http.Request) {
			n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/zero/"), 10, 64)
			if err != nil || n < 0 {
				http.Error(w, "want /zero/BYTES", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			for ; n > 0; n -= int64(len(zeros)) {
				chunk := zeros
				if n < int64(len(chunk)) {
					chunk = chunk[:n]
				}
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
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
		go func() {
			// Without SCTP in the kernel the pod still serves HTTP and UDP.
			fmt.Fprintln(os.Stderr, serveSCTP(os.Args[2], name))
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
	case "sctp":
		answer, err := askSCTP(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(answer)
	case "dial":
		conn, err := net.DialTimeout("tcp", os.Args[2], 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("connected to %s\n", conn.RemoteAddr())
		conn.Close()
	case "ping":
		if err := ping(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "links":
		if err := link(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "bench":
		seconds, err := strconv.ParseFloat(os.Args[3], 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench URL SECONDS:", err)
			os.Exit(2)
		}
		source := ""
		if len(os.Args) == 5 {
			source = os.Args[4]
		}
		if err := bench(os.Args[2], time.Duration(seconds*float64(time.Second)), source); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "stream":
		start := time.Now()
		resp, err := http.Get(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "status", resp.Status, err)
			os.Exit(1)
		}
		seconds := time.Since(start).Seconds()
		fmt.Printf("%d bytes in %.2f s: %.0f Mbit/s\n", n, seconds, float64(n)*8/seconds/1e6)
	case "hold":
		count, err := strconv.Atoi(os.Args[3])
		seconds, err2 := strconv.ParseFloat(os.Args[4], 64)
		if err != nil || err2 != nil {
			fmt.Fprintln(os.Stderr, "hold ADDR COUNT SECONDS: COUNT and SECONDS are numbers")
			os.Exit(2)
		}
		if err := hold(os.Args[2], count, time.Duration(seconds*float64(time.Second))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
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

// hold keeps count connections to addr's /hold and reports how each ended.
func hold(addr string, count int, duration time.Duration) error {
	type held struct {
		backend string
		ended   chan error
	}
	conns := make([]held, count)
	for i := range conns {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		fmt.Fprintf(conn, "GET /hold HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
		reader := bufio.NewReader(conn)
		for {
			line, err := reader.ReadString('\n')
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			if strings.HasPrefix(line, "pod ") {
				conns[i].backend = strings.TrimSpace(strings.TrimPrefix(line, "pod "))
				break
			}
		}
		conns[i].ended = make(chan error, 1)
		go func(reader *bufio.Reader, ended chan error) {
			_, err := io.Copy(io.Discard, reader)
			if err == nil {
				err = io.EOF
			}
			ended <- err
		}(reader, conns[i].ended)
	}
	fmt.Printf("holding %d\n", count)
	time.Sleep(duration)
	for i, c := range conns {
		select {
		case err := <-c.ended:
			how := err.Error()
			switch {
			case errors.Is(err, syscall.ECONNABORTED):
				how = "aborted"
			case errors.Is(err, syscall.ECONNRESET):
				how = "reset"
			case errors.Is(err, io.EOF):
				how = "closed"
			}
			fmt.Printf("connection %d to pod %s: ended: %s\n", i, c.backend, how)
		default:
			fmt.Printf("connection %d to pod %s: open\n", i, c.backend)
		}
	}
	return nil
}

// bench measures short connections: each request dials anew (no keep-alive),
// the way a client without a connection pool talks to a Service.
func bench(url string, duration time.Duration, source string) error {
	dialer := &net.Dialer{}
	if source != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	transport := &http.Transport{DisableKeepAlives: true, DialContext: dialer.DialContext}
	client := http.Client{Timeout: 5 * time.Second, Transport: transport}
	var latencies []time.Duration
	start := time.Now()
	for time.Since(start) < duration {
		begin := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		latencies = append(latencies, time.Since(begin))
	}
	elapsed := time.Since(start).Seconds()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	at := func(q float64) float64 { return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds()) }
	fmt.Printf("%d requests in %.1f s: %.0f conn/s, p50 %.0f us, p99 %.0f us\n",
		len(latencies), elapsed, float64(len(latencies))/elapsed, at(0.50), at(0.99))
	return nil
}

// ping sends up to three ICMPv6 echo requests and returns once one is
// answered. A SOCK_DGRAM ICMPv6 socket needs no privilege, only the group in
// net.ipv4.ping_group_range (which covers IPv6 too); the kernel sets the
// identifier and checksum.
func ping(address string) error {
	ip := net.ParseIP(address)
	if ip == nil || ip.To4() != nil {
		return fmt.Errorf("%q is not an IPv6 address", address)
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("ping socket: %w (is the group in net.ipv4.ping_group_range?)", err)
	}
	defer syscall.Close(fd)
	timeout := syscall.NsecToTimeval(int64(time.Second))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &timeout); err != nil {
		return err
	}
	to := &syscall.SockaddrInet6{}
	copy(to.Addr[:], ip.To16())
	reply := make([]byte, 1500)
	for seq := uint16(1); seq <= 3; seq++ {
		request := []byte{128, 0, 0, 0, 0, 0, 0, 0, 'v', '6', 'n', 'o', 'd', 'e'}
		binary.BigEndian.PutUint16(request[6:], seq)
		if err := syscall.Sendto(fd, request, 0, to); err != nil {
			return fmt.Errorf("sending echo request %d: %w", seq, err)
		}
		n, from, err := syscall.Recvfrom(fd, reply, 0)
		if err != nil {
			continue
		}
		if src, ok := from.(*syscall.SockaddrInet6); ok && n >= 8 && reply[0] == 129 {
			fmt.Printf("echo reply %d from %s\n", binary.BigEndian.Uint16(reply[6:]), net.IP(src.Addr[:]))
			return nil
		}
	}
	return fmt.Errorf("no echo reply from %s", address)
}

// rtnetlink attribute numbers (linux/if_link.h); syscall lacks the newer ones.
const (
	iflaLinkInfo   = 18
	iflaGSOMaxSize = 41
	iflaGROMaxSize = 58
	iflaInfoKind   = 1
)

// link prints what the kernel says of one device of this network namespace:
// sysfs does not show GSO/GRO maximum sizes, rtnetlink does.
func link(name string) error {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return fmt.Errorf("rtnetlink: %w", err)
	}
	messages, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return err
	}
	for i := range messages {
		if messages[i].Header.Type != syscall.RTM_NEWLINK {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&messages[i])
		if err != nil {
			return err
		}
		var ifname, kind string
		var gso, gro uint32
		for _, a := range attrs {
			switch a.Attr.Type {
			case syscall.IFLA_IFNAME:
				ifname = strings.TrimRight(string(a.Value), "\x00")
			case iflaGSOMaxSize:
				gso = binary.NativeEndian.Uint32(a.Value)
			case iflaGROMaxSize:
				gro = binary.NativeEndian.Uint32(a.Value)
			case iflaLinkInfo:
				// Nested attributes: length, type, value, padded to 4 bytes.
				for v := a.Value; len(v) >= 4; {
					l := int(binary.NativeEndian.Uint16(v))
					if l < 4 || l > len(v) {
						break
					}
					if binary.NativeEndian.Uint16(v[2:]) == iflaInfoKind {
						kind = strings.TrimRight(string(v[4:l]), "\x00")
					}
					v = v[min((l+3)&^3, len(v)):]
				}
			}
		}
		if ifname == name {
			fmt.Printf("%s %s %d %d\n", ifname, kind, gso, gro)
			return nil
		}
	}
	return fmt.Errorf("no device %s", name)
}
