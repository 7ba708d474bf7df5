// SPDX-License-Identifier: Apache-2.0
// 1-byte TCP request/response round trips and their tail, for
// tests/bench/bandwidth (built by it with the host's gcc): the neighbour
// pod's latency while another pod fills its bandwidth limit.
//
//   rr server ADDRESS PORT                       echo every byte back, one
//                                                connection at a time, forever
//   rr client ADDRESS PORT SECONDS INTERVAL_US   one connection, TCP_NODELAY,
//                                                up to 1,000 round trips (a
//                                                tenth of SECONDS at most)
//                                                unmeasured, then one request
//                                                every INTERVAL_US (0: back to
//                                                back; a late one goes at once,
//                                                none piles up) until SECONDS
//                                                after the start; prints
//                                                "count p50 p99 p999 max", µs
//
// The SECONDS count from the start, connecting and warming up included: a
// client whose round trips queue behind a limiter's backlog measures that
// backlog in its window, not the quiet after it (which a fixed count of
// warm-up trips would wait for). Such a client makes few round trips: a
// small count means slow ones, and none at all prints "0 - - - -". Times are CLOCK_MONOTONIC from before send()
// to after recv(); ranks are nearest-rank. A round trip over 30 s ends the
// run (exit 1).
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sockets.h"

static int64_t ns_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int serve(const char *addr, int port)
{
	struct sockaddr_storage sa;
	socklen_t len = address(addr, port, &sa);
	int ls = socket(sa.ss_family, SOCK_STREAM, 0), one = 1;
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 || bind(ls, (struct sockaddr *)&sa, len) < 0 || listen(ls, 8) < 0) {
		perror("rr server");
		return 1;
	}
	for (;;) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			continue;
		nodelay(c);
		char b;
		while (recv(c, &b, 1, 0) == 1 && send(c, &b, 1, MSG_NOSIGNAL) == 1)
			;
		close(c);
	}
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double rank(const int64_t *s, size_t n, double p)
{
	size_t i = (size_t)(p / 100 * n + 0.999999999);
	if (i < 1)
		i = 1;
	if (i > n)
		i = n;
	return s[i - 1] / 1000.0;
}

static int round_trip(int fd)
{
	char b = 'x';
	if (send(fd, &b, 1, MSG_NOSIGNAL) != 1 || recv(fd, &b, 1, 0) != 1) {
		fprintf(stderr, "rr client: round trip failed: %s\n", errno ? strerror(errno) : "closed");
		return -1;
	}
	return 0;
}

static int client(const char *addr, int port, double secs, long interval_us)
{
	struct sockaddr_storage sa;
	socklen_t len = address(addr, port, &sa);
	int fd = socket(sa.ss_family, SOCK_STREAM, 0);
	double end = now() + secs;
	struct timeval limit = { .tv_sec = 30 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) < 0) {
		perror("rr client: connect");
		return 1;
	}
	nodelay(fd);
	double warm_until = now() + secs / 10;
	for (int i = 0; i < 1000 && now() < warm_until; i++)
		if (round_trip(fd) < 0)
			return 1;
	size_t n = 0, cap = 1 << 16;
	int64_t *s = malloc(cap * sizeof(*s));
	int64_t interval = (int64_t)interval_us * 1000, next = ns_now();
	for (;;) {
		int64_t t0 = ns_now();
		if (now() >= end)
			break;
		if (interval > 0 && t0 < next) {
			struct timespec ts = { .tv_sec = next / 1000000000, .tv_nsec = next % 1000000000 };
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
			t0 = ns_now();
		}
		if (round_trip(fd) < 0)
			return 1;
		int64_t t1 = ns_now();
		if (n == cap)
			s = realloc(s, (cap *= 2) * sizeof(*s));
		s[n++] = t1 - t0;
		next += interval;
		if (next < t1)
			next = t1;
	}
	close(fd);
	if (n == 0) { /* one round trip outlasted the window */
		printf("0 - - - -\n");
		return 0;
	}
	qsort(s, n, sizeof(*s), cmp);
	printf("%zu %.1f %.1f %.1f %.1f\n", n, rank(s, n, 50), rank(s, n, 99), rank(s, n, 99.9), s[n - 1] / 1000.0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "server"))
		return serve(argv[2], atoi(argv[3]));
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atof(argv[4]), atol(argv[5]));
	fprintf(stderr, "usage: rr server ADDRESS PORT | client ADDRESS PORT SECONDS INTERVAL_US\n");
	return 2;
}
