// SPDX-License-Identifier: Apache-2.0
// New flows per second under churn, for tests/bench/nat64-churn (built by it
// with the host's gcc): every flow is a new socket, so a NAT on the way has to
// make a new binding for each, as for a DNS query from a fresh source port.
//
//   udpchurn server PORT PROCS
//       on [::]:PORT (IPv4 too, as mapped addresses), PROCS processes each
//       echoing UDP and PROCS processes each accepting TCP and closing at
//       once, forever (SO_REUSEPORT spreads the flows over them)
//   udpchurn udp|tcp ADDRESS PORT SECONDS WORKERS INTERVAL TIMEOUT_MS [SOURCE...]
//       WORKERS processes for SECONDS, each in a loop: a new socket, bound to
//       the next SOURCE address (round-robin; the kernel picks the port), then
//         udp: one 32-byte datagram to ADDRESS and PORT, and its echo;
//         tcp: connect, read to the server's close, close;
//       a flow not answered within TIMEOUT_MS (lost, refused, reset) is a
//       failure. Prints, every INTERVAL seconds and at the end,
//         interval END_SECONDS ANSWERED_PER_S FAILED_PER_S
//         total SECONDS ANSWERED FAILED ANSWERED_PER_S
//       from the counts the workers keep in shared memory; the parent reads
//       them on a clock, so that a NAT starving midway shows in the lines.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#include "sockets.h"

static int listener(int type, int port)
{
	struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = in6addr_any};
	int s = socket(AF_INET6, type, 0), one = 1, zero = 0;
	setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&any, sizeof(any)) < 0 || (type == SOCK_STREAM && listen(s, 4096) < 0)) {
		perror("server");
		exit(1);
	}
	return s;
}

static void server(int port, int procs)
{
	// Each process its own socket: with SO_REUSEPORT the kernel hashes the
	// flows over them, no lock between the processes. PR_SET_PDEATHSIG: the
	// benchmark stops the server by its pid (SIGKILL at its exit), and the
	// children must not outlive it.
	pid_t parent = getpid();
	for (int p = 0; p < 2 * procs; p++) {
		if (fork() != 0)
			continue;
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0);
		if (p % 2 == 0) {
			int s = listener(SOCK_DGRAM, port);
			char buf[2048];
			struct sockaddr_storage peer;
			for (;;) {
				socklen_t len = sizeof(peer);
				ssize_t n = recvfrom(s, buf, sizeof(buf), 0, (struct sockaddr *)&peer, &len);
				if (n >= 0)
					sendto(s, buf, n, 0, (struct sockaddr *)&peer, len);
			}
		}
		int s = listener(SOCK_STREAM, port);
		for (;;) {
			int c = accept(s, NULL, NULL);
			if (c >= 0)
				close(c);
		}
	}
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "server") == 0) {
		int procs = atoi(argv[3]);
		server(atoi(argv[2]), procs > 0 ? procs : 1);
	}
	if (argc < 8 || (strcmp(argv[1], "udp") != 0 && strcmp(argv[1], "tcp") != 0)) {
		fprintf(stderr, "usage: udpchurn server PORT PROCS\n"
				"       udpchurn udp|tcp ADDRESS PORT SECONDS WORKERS INTERVAL TIMEOUT_MS [SOURCE...]\n");
		return 2;
	}
	int tcp = strcmp(argv[1], "tcp") == 0;
	struct sockaddr_storage sa;
	socklen_t len = address(argv[2], atoi(argv[3]), &sa);
	double seconds = atof(argv[4]), interval = atof(argv[6]);
	int workers = atoi(argv[5]), timeout_ms = atoi(argv[7]);
	int nsources = argc - 8;
	struct sockaddr_storage *sources = calloc(nsources ? nsources : 1, sizeof(*sources));
	socklen_t source_len = 0;
	for (int i = 0; i < nsources; i++) {
		source_len = address(argv[8 + i], 0, &sources[i]);
		if (sources[i].ss_family != sa.ss_family) {
			fprintf(stderr, "source %s is not of the target's family\n", argv[8 + i]);
			return 2;
		}
	}
	struct timeval timeout = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	// Per worker: answered, failed, each on its own cache line.
	enum { STRIDE = 8 };
	volatile long *counts = mmap(NULL, sizeof(long) * STRIDE * (workers + 1), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	volatile long *stop = &counts[STRIDE * workers];
	double start = now();
	for (int w = 0; w < workers; w++) {
		if (fork() != 0)
			continue;
		volatile long *answered = &counts[STRIDE * w], *failed = answered + 1;
		// Workers start on different sources, so all of them are in use at once.
		unsigned next = w, seq = 0;
		char out[32], in[64];
		while (!*stop) {
			int ok = 0, s = socket(sa.ss_family, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
			if (s < 0) {
				(*failed)++;
				usleep(1000);
				continue;
			}
			setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
			// For a TCP socket, SO_SNDTIMEO bounds a blocking connect too.
			setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
			if (nsources) {
				// The port is the kernel's pick at connect (TCP) or bind (UDP),
				// a new one for each flow; for TCP chosen with the destination
				// known, so the 4-tuple is what must be unique.
				int one = 1;
				if (tcp)
					setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
				if (bind(s, (struct sockaddr *)&sources[next++ % nsources], source_len) < 0)
					goto done;
			}
			if (connect(s, (struct sockaddr *)&sa, len) < 0)
				goto done;
			if (tcp) {
				ok = read(s, in, 1) == 0;
			} else {
				int n = snprintf(out, sizeof(out), "%d %u", w, seq++);
				memset(out + n, ' ', sizeof(out) - n);
				// Connected: only the server's datagram is received; a
				// refusal (ICMP) ends the wait with ECONNREFUSED.
				ok = send(s, out, sizeof(out), 0) == sizeof(out) && recv(s, in, sizeof(in), 0) == sizeof(out) &&
				     memcmp(in, out, sizeof(out)) == 0;
			}
		done:
			close(s);
			if (ok)
				(*answered)++;
			else
				(*failed)++;
		}
		_exit(0);
	}
	long last_answered = 0, last_failed = 0;
	double last = start;
	for (int k = 1;; k++) {
		double end = k * interval < seconds ? k * interval : seconds, wait = start + end - now();
		if (wait > 0) {
			struct timespec ts = {.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (time_t)wait) * 1e9)};
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		long a = 0, f = 0;
		for (int w = 0; w < workers; w++) {
			a += counts[STRIDE * w];
			f += counts[STRIDE * w + 1];
		}
		double t = now(), span = t - last;
		printf("interval %.0f %.0f %.0f\n", end, (a - last_answered) / span, (f - last_failed) / span);
		fflush(stdout);
		last_answered = a;
		last_failed = f;
		last = t;
		if (end >= seconds)
			break;
	}
	*stop = 1;
	while (wait(NULL) > 0)
		;
	// What finished after the last line (a flow in flight) is counted as well.
	long a = 0, f = 0;
	for (int w = 0; w < workers; w++) {
		a += counts[STRIDE * w];
		f += counts[STRIDE * w + 1];
	}
	double took = last - start;
	printf("total %.1f %ld %ld %.0f\n", took, a, f, a / took);
	return 0;
}
