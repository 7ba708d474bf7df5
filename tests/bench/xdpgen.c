// SPDX-License-Identifier: Apache-2.0
/*
 * A packet generator in the kernel, for tests/bench/xdp: runs xdpgen_send
 * (xdpgen.bpf.c) under BPF_PROG_TEST_RUN with live frames, which sends each
 * frame it makes out of DEVICE as a driver would, for SECONDS. The frame:
 * Ethernet from the device's MAC to DST_MAC, IPv6 (or IPv4, if SRC and DST
 * are IPv4 addresses) from SRC to DST, UDP from ports 10000 to
 * 10000+FLOWS-1 (in turn) to DPORT, a payload that makes it 78 bytes.
 *
 *   xdpgen OBJECT DEVICE DST_MAC SRC DST DPORT FLOWS SECONDS
 *
 * Prints the frames it handed to the device and the seconds it took (a
 * little over SECONDS: the last call runs to its end). Run it in DEVICE's
 * namespace.
 */
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_ether.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef BPF_F_TEST_XDP_LIVE_FRAMES
#define BPF_F_TEST_XDP_LIVE_FRAMES (1U << 1)
#endif

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static uint32_t sum16(const uint8_t *p, size_t n, uint32_t sum)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		sum += (uint32_t)p[i] << 8 | p[i + 1];
	return sum;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: %s OBJECT DEVICE DST_MAC SRC DST DPORT FLOWS SECONDS\n", argv[0]);
		return 2;
	}
	const char *device = argv[2];
	unsigned ifindex = if_nametoindex(device);
	if (!ifindex)
		die(device);

	uint8_t frame[78] = { 0 };
	unsigned mac[6];
	if (sscanf(argv[3], "%x:%x:%x:%x:%x:%x", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) != 6) {
		fprintf(stderr, "bad MAC %s\n", argv[3]);
		return 2;
	}
	for (int i = 0; i < 6; i++)
		frame[i] = mac[i];
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", device);
	if (s < 0 || ioctl(s, SIOCGIFHWADDR, &ifr) < 0)
		die("SIOCGIFHWADDR");
	memcpy(frame + 6, ifr.ifr_hwaddr.sa_data, 6);
	struct in6_addr src6, dst6;
	struct in_addr src4, dst4;
	int ipv4 = inet_pton(AF_INET, argv[4], &src4) == 1 && inet_pton(AF_INET, argv[5], &dst4) == 1;
	if (!ipv4 && (inet_pton(AF_INET6, argv[4], &src6) != 1 || inet_pton(AF_INET6, argv[5], &dst6) != 1)) {
		fprintf(stderr, "bad addresses %s %s: both IPv6 or both IPv4\n", argv[4], argv[5]);
		return 2;
	}
	uint8_t *ip = frame + 14, *udp = ip + (ipv4 ? 20 : 40);
	const size_t udp_len = sizeof(frame) - (udp - frame);
	uint32_t sum;
	if (ipv4) {
		frame[12] = 0x08, frame[13] = 0x00;
		ip[0] = 0x45;
		ip[3] = sizeof(frame) - 14;
		ip[6] = 0x40; /* don't fragment */
		ip[8] = 64;
		ip[9] = 17; /* UDP */
		memcpy(ip + 12, &src4, 4);
		memcpy(ip + 16, &dst4, 4);
		sum = sum16(ip, 20, 0);
		while (sum >> 16)
			sum = (sum & 0xffff) + (sum >> 16);
		ip[10] = (uint16_t)~sum >> 8, ip[11] = (uint16_t)~sum & 0xff;
		sum = sum16(ip + 12, 8, 17 + udp_len);
	} else {
		frame[12] = 0x86, frame[13] = 0xdd;
		ip[0] = 0x60;
		ip[5] = udp_len;
		ip[6] = 17; /* UDP */
		ip[7] = 64;
		memcpy(ip + 8, &src6, 16);
		memcpy(ip + 24, &dst6, 16);
		sum = sum16(ip + 8, 32, 17 + udp_len);
	}
	unsigned dport = atoi(argv[6]);
	udp[0] = 10000 >> 8, udp[1] = 10000 & 0xff;
	udp[2] = dport >> 8, udp[3] = dport & 0xff;
	udp[4] = 0, udp[5] = udp_len;
	memset(udp + 8, '.', udp_len - 8);
	memcpy(udp + 8, "v6node xdp bench", 16);
	sum = sum16(udp, udp_len, sum);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	uint16_t check = ~sum ? ~sum : 0xffff;
	udp[6] = check >> 8, udp[7] = check & 0xff;

	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj))
		die("loading the generator");
	struct bpf_program *prog = bpf_object__find_program_by_name(obj, "xdpgen_send");
	struct bpf_map *cfg = bpf_object__find_map_by_name(obj, "xdpgen_cfg");
	if (!prog || !cfg)
		die("xdpgen_send or xdpgen_cfg missing");
	struct {
		uint32_t ifindex, flows;
		uint8_t head[62];
		uint8_t ipv4;
	} value = { ifindex, (uint32_t)atoi(argv[7]), .ipv4 = ipv4 };
	uint32_t key = 0;
	memcpy(value.head, frame, sizeof(value.head));
	if (bpf_map_update_elem(bpf_map__fd(cfg), &key, &value, 0))
		die("xdpgen_cfg");

	double seconds = atof(argv[8]), start = now();
	unsigned long long sent = 0;
	/* Each call attaches the program to the kernel's XDP dispatcher and
	 * detaches it after, and both wait for the kernel: at 2^18 frames a call
	 * the generator, and with it the node, was idle a third of the time. */
	while (now() - start < seconds) {
		LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame, .data_size_in = sizeof(frame), .repeat = 1 << 21,
			    .flags = BPF_F_TEST_XDP_LIVE_FRAMES, .batch_size = 64);
		if (bpf_prog_test_run_opts(bpf_program__fd(prog), &opts))
			die("BPF_PROG_TEST_RUN (live frames)");
		sent += opts.repeat;
	}
	printf("%llu %.6f\n", sent, now() - start);
	return 0;
}
