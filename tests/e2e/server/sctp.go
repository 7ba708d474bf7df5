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

// The syscall package, unlike net and os, does not retry a call that a
// signal interrupted, and Go's runtime signals its own threads (SIGURG
// preempts goroutines): a blocking read or write may return EINTR at any
// time.
func retryingEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

func readSCTP(fd int, buf []byte) (int, error) {
	return retryingEINTR(func() (int, error) { return syscall.Read(fd, buf) })
}

func writeSCTP(fd int, msg []byte) (int, error) {
	return retryingEINTR(func() (int, error) { return syscall.Write(fd, msg) })
}

// connectSCTP is a blocking connect that survives EINTR: the association
// goes on being set up after the interruption, and connect() again answers
// EALREADY until it is up (EISCONN) or failed.
func connectSCTP(fd int, sa syscall.Sockaddr, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	err := syscall.Connect(fd, sa)
	for (err == syscall.EINTR || err == syscall.EALREADY) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		err = syscall.Connect(fd, sa)
	}
	if err == syscall.EISCONN {
		return nil
	}
	return err
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
			if _, err := readSCTP(conn, buf); err != nil {
				return
			}
			writeSCTP(conn, []byte(fmt.Sprintf("pod %s saw %s over sctp\n", name, sctpPeer(from))))
			// Until the client ends the association.
			readSCTP(conn, buf)
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
	const patience = 10 * time.Second
	timeout := syscall.NsecToTimeval(patience.Nanoseconds())
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &timeout)
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &timeout)
	if err := connectSCTP(fd, sa, patience); err != nil {
		return "", fmt.Errorf("SCTP connect %s: %w", addr, err)
	}
	peer, err := syscall.Getpeername(fd)
	if err != nil {
		return "", err
	}
	if _, err := writeSCTP(fd, []byte("hello")); err != nil {
		return "", fmt.Errorf("SCTP send: %w", err)
	}
	buf := make([]byte, 2048)
	n, err := readSCTP(fd, buf)
	if err != nil {
		return "", fmt.Errorf("SCTP receive from %s: %w", addr, err)
	}
	return fmt.Sprintf("connected to %s: %s", sctpPeer(peer), buf[:n]), nil
}
