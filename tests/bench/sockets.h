/* SPDX-License-Identifier: Apache-2.0 */
/* What the benchmarks' C clients share: an address from text, IPv6 or
 * IPv4, and a monotonic clock in seconds. Header-only, included by each. */
#ifndef V6NODE_BENCH_SOCKETS_H
#define V6NODE_BENCH_SOCKETS_H

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static socklen_t address(const char *text, int port, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	struct sockaddr_in6 *six = (struct sockaddr_in6 *)out;
	struct sockaddr_in *four = (struct sockaddr_in *)out;
	if (inet_pton(AF_INET6, text, &six->sin6_addr) == 1) {
		six->sin6_family = AF_INET6;
		six->sin6_port = htons(port);
		return sizeof(*six);
	}
	if (inet_pton(AF_INET, text, &four->sin_addr) == 1) {
		four->sin_family = AF_INET;
		four->sin_port = htons(port);
		return sizeof(*four);
	}
	fprintf(stderr, "not an address: %s\n", text);
	exit(2);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
