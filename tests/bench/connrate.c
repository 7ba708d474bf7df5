// SPDX-License-Identifier: Apache-2.0
// New TCP connections per second, for tests/bench/nat64-stateful (built by it
// with the host's gcc; no tool in Debian measures this without a registry).
//
//   connrate server ADDRESS PORT              accept and close, forever
//   connrate client ADDRESS PORT SECONDS N    N processes, each connecting,
//                                             reading to the server's close
//                                             and closing, for SECONDS; prints
//                                             connections completed per second
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sockets.h"

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: connrate server ADDRESS PORT | client ADDRESS PORT SECONDS N\n");
		return 2;
	}
	struct sockaddr_storage sa;
	socklen_t len = address(argv[2], atoi(argv[3]), &sa);
	if (strcmp(argv[1], "server") == 0) {
		int s = socket(sa.ss_family, SOCK_STREAM, 0), one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&sa, len) < 0 || listen(s, 4096) < 0) {
			perror("server");
			return 1;
		}
		for (;;) {
			int c = accept(s, NULL, NULL);
			if (c >= 0)
				close(c);
		}
	}
	if (argc < 6)
		return 2;
	double seconds = atof(argv[4]);
	int workers = atoi(argv[5]);
	long *counts = mmap(NULL, sizeof(long) * workers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	long *failures = mmap(NULL, sizeof(long) * workers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	double start = now();
	for (int w = 0; w < workers; w++) {
		if (fork() == 0) {
			char byte;
			while (now() - start < seconds) {
				int c = socket(sa.ss_family, SOCK_STREAM, 0);
				if (connect(c, (struct sockaddr *)&sa, len) == 0 && read(c, &byte, 1) == 0)
					counts[w]++;
				else
					failures[w]++;
				close(c);
			}
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	long total = 0, failed = 0;
	for (int w = 0; w < workers; w++) {
		total += counts[w];
		failed += failures[w];
	}
	printf("%.0f %ld\n", total / (now() - start), failed);
	return 0;
}
