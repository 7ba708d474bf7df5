// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// Go's standard library has no SCTP: one-to-one style sockets (SOCK_STREAM,
// RFC 6458 section 4) through the syscall package.
const ipprotoSCTP = 132

func sctpSockaddr(addr string) (*syscall.SockaddrInet6, error) {
	a, err := net.ResolveTCPAddr("tcp6", addr)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	return sa, nil
}

func sctpPeer(sa syscall.Sockaddr) string {
	if in6, ok := sa.(*syscall.SockaddrInet6); ok {
		return net.JoinHostPort(net.IP(in6.Addr[:]).String(), strconv.Itoa(in6.Port))
	}
	return fmt.Sprint(sa)
}

// serveSCTP answers each association's first message on addr with "pod
// NAME saw PEER over sctp", the peer as the pod sees it.
func serveSCTP(addr, name string) error {
	sa, err := sctpSockaddr(addr)
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM, ipprotoSCTP)
	if err != nil {
		return fmt.Errorf("SCTP socket: %w", err)
	}
	syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(fd, sa); err != nil {
		return fmt.Errorf("SCTP bind %s: %w", addr, err)
	}
	if err := syscall.Listen(fd, 64); err != nil {
		return fmt.Errorf("SCTP listen: %w", err)
	}
	for {
		conn, from, err := syscall.Accept(fd)
		if err != nil {
			continue
		}
		go func() {
			defer syscall.Close(conn)
			buf := make([]byte, 2048)
			if _, err := syscall.Read(conn, buf); err != nil {
				return
			}
			syscall.Write(conn, []byte(fmt.Sprintf("pod %s saw %s over sctp\n", name, sctpPeer(from))))
			// Until the client ends the association.
			syscall.Read(conn, buf)
		}()
	}
}

// askSCTP opens an association to addr, sends one message and returns
// "connected to PEER: ANSWER" (PEER as getpeername reports it).
func askSCTP(addr string) (string, error) {
	sa, err := sctpSockaddr(addr)
	if err != nil {
		return "", err
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM, ipprotoSCTP)
	if err != nil {
		return "", fmt.Errorf("SCTP socket: %w", err)
	}
	defer syscall.Close(fd)
	// connect() waits as long as a send may (sock_sndtimeo): INIT is
	// retransmitted after 3 s, so allow a few.
	timeout := syscall.NsecToTimeval((10 * time.Second).Nanoseconds())
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &timeout)
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &timeout)
	if err := syscall.Connect(fd, sa); err != nil {
		return "", fmt.Errorf("SCTP connect %s: %w", addr, err)
	}
	peer, err := syscall.Getpeername(fd)
	if err != nil {
		return "", err
	}
	if _, err := syscall.Write(fd, []byte("hello")); err != nil {
		return "", fmt.Errorf("SCTP send: %w", err)
	}
	buf := make([]byte, 2048)
	n, err := syscall.Read(fd, buf)
	if err != nil {
		return "", fmt.Errorf("SCTP receive from %s: %w", addr, err)
	}
	return fmt.Sprintf("connected to %s: %s", sctpPeer(peer), buf[:n]), nil
}
