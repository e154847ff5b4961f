/*
 * ibv_coll_devinfo - list the ibv_coll devices and print their attributes,
 * their port and their GID table, in the manner of ibv_devinfo.
 *
 *   ibv_coll_devinfo [-d NAME] [-l] [-v] [-c] [-h]
 */
#define _POSIX_C_SOURCE 200809L

#include <ibv_coll/ibv_coll.h>
#include "ibvc_version.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prog = "ibv_coll_devinfo";

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s [options]\n"
		"Print the attributes of the ibv_coll devices.\n"
		"\n"
		"Options:\n"
		"  -d, --ib-dev=NAME   print only device NAME (default: every device)\n"
		"  -l, --list          print only the device names, one per line\n"
		"  -v, --verbose       also print the configuration variables\n"
		"  -c, --config        print only the configuration variables\n"
		"  -V, --version       print the version and exit\n"
		"  -h, --help          print this help and exit\n",
		prog);
}

static const char *port_state_str(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_NOP: return "PORT_NOP";
	case IBV_PORT_DOWN: return "PORT_DOWN";
	case IBV_PORT_INIT: return "PORT_INIT";
	case IBV_PORT_ARMED: return "PORT_ARMED";
	case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
	}
	return "invalid state";
}

/* enum ibv_mtu to bytes: 1 -> 256 ... 5 -> 4096; 0 when out of range. */
static unsigned int mtu_bytes(enum ibv_mtu m)
{
	if (m < IBV_MTU_256 || m > IBV_MTU_4096)
		return 0;
	return 128u << m;
}

static const char *link_layer_str(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_UNSPECIFIED: return "Unspecified";
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	}
	return "Unknown";
}

/* A GUID as four groups of 16 bits, as ibv_devinfo shows it. */
static void guid_str(uint64_t guid, char *buf, size_t len)
{
	snprintf(buf, len, "%04x:%04x:%04x:%04x", (unsigned int)(guid >> 48) & 0xffff,
		 (unsigned int)(guid >> 32) & 0xffff, (unsigned int)(guid >> 16) & 0xffff,
		 (unsigned int)guid & 0xffff);
}

static int is_v4_mapped(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

static void print_gid(int index, const union ibv_gid *gid)
{
	char text[INET6_ADDRSTRLEN];
	char v4[INET_ADDRSTRLEN];

	if (!inet_ntop(AF_INET6, gid->raw, text, sizeof(text)))
		snprintf(text, sizeof(text), "?");
	if (is_v4_mapped(gid)) {
		if (!inet_ntop(AF_INET, gid->raw + 12, v4, sizeof(v4)))
			snprintf(v4, sizeof(v4), "?");
		printf("\t\t\tGID[%3d]:\t\t%s (IPv4 %s), RoCE v2\n", index, text, v4);
	} else {
		printf("\t\t\tGID[%3d]:\t\t%s (IPv6), RoCE v2\n", index, text);
	}
}

static void print_device_attr(const struct ibv_coll_device_attr *a)
{
	char guid[32];

	guid_str(a->node_guid, guid, sizeof(guid));
	printf("\ttransport:\t\t\tRoCEv2 over UDP (userspace)\n");
	printf("\tfw_ver:\t\t\t\t%s\n", a->fw_ver);
	printf("\tnode_guid:\t\t\t%s\n", guid);
	printf("\tvendor_id:\t\t\t0x%04" PRIx32 "\n", a->vendor_id);
	printf("\tvendor_part_id:\t\t\t%" PRIu32 "\n", a->vendor_part_id);
	printf("\thw_ver:\t\t\t\t0x%" PRIx32 "\n", a->hw_ver);
	printf("\tphys_port_cnt:\t\t\t%u\n", (unsigned int)a->phys_port_cnt);
	printf("\tmax_mr_size:\t\t\t0x%" PRIx64 "\n", a->max_mr_size);
	printf("\tpage_size_cap:\t\t\t0x%" PRIx64 "\n", a->page_size_cap);
	printf("\tmax_qp:\t\t\t\t%" PRIu32 "\n", a->max_qp);
	printf("\tmax_qp_wr:\t\t\t%" PRIu32 "\n", a->max_qp_wr);
	printf("\tmax_sge:\t\t\t%" PRIu32 "\n", a->max_sge);
	printf("\tmax_cq:\t\t\t\t%" PRIu32 "\n", a->max_cq);
	printf("\tmax_cqe:\t\t\t%" PRIu32 "\n", a->max_cqe);
	printf("\tmax_mr:\t\t\t\t%" PRIu32 "\n", a->max_mr);
	printf("\tmax_pd:\t\t\t\t%" PRIu32 "\n", a->max_pd);
	printf("\tmax_qp_rd_atom:\t\t\t%" PRIu32 "\n", a->max_qp_rd_atom);
	printf("\tmax_qp_init_rd_atom:\t\t%" PRIu32 "\n", a->max_qp_init_rd_atom);
	printf("\tmax_msg_sz:\t\t\t0x%" PRIx32 "\n", a->max_msg_sz);
}

/* Print one port; 0 or an errno value. */
static int print_port(struct ibv_coll_context *ctx, const char *name, uint8_t port)
{
	struct ibv_coll_port_attr pa;
	int err;

	memset(&pa, 0, sizeof(pa));
	err = ibv_query_coll_port(ctx, port, &pa);
	if (err) {
		fprintf(stderr, "%s: %s: ibv_query_coll_port(%u): %s\n", prog, name,
			(unsigned int)port, strerror(err));
		return err;
	}
	printf("\t\tport:\t%u\n", (unsigned int)port);
	printf("\t\t\tstate:\t\t\t%s (%d)\n", port_state_str(pa.state), (int)pa.state);
	printf("\t\t\tmax_mtu:\t\t%u (%d)\n", mtu_bytes(pa.max_mtu), (int)pa.max_mtu);
	printf("\t\t\tactive_mtu:\t\t%u (%d)\n", mtu_bytes(pa.active_mtu), (int)pa.active_mtu);
	printf("\t\t\tlink_layer:\t\t%s\n", link_layer_str(pa.link_layer));
	printf("\t\t\tnetdev:\t\t\t%.*s\n", (int)sizeof(pa.netdev), pa.netdev);
	printf("\t\t\tnetdev_mtu:\t\t%" PRIu32 "\n", pa.netdev_mtu);
	printf("\t\t\tudp_port:\t\t%u\n", (unsigned int)pa.udp_port);
	printf("\t\t\tmax_msg_sz:\t\t0x%" PRIx32 "\n", pa.max_msg_sz);
	printf("\t\t\tgid_tbl_len:\t\t%d\n", pa.gid_tbl_len);
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid gid;

		err = ibv_query_coll_gid(ctx, port, i, &gid);
		if (err) {
			fprintf(stderr, "%s: %s: ibv_query_coll_gid(%u, %d): %s\n", prog, name,
				(unsigned int)port, i, strerror(err));
			return err;
		}
		print_gid(i, &gid);
	}
	return 0;
}

/* Open one device and print everything about it; 0 or an errno value. */
static int print_device(struct ibv_coll_device *dev)
{
	const char *name = ibv_get_coll_device_name(dev);
	struct ibv_coll_device_attr attr;
	struct ibv_coll_context *ctx;
	int err, cerr;

	if (!name)
		name = "(unnamed)";
	ctx = ibv_open_coll_device(dev);
	if (!ctx) {
		err = errno ? errno : EIO;
		fprintf(stderr, "%s: %s: ibv_open_coll_device: %s\n", prog, name, strerror(err));
		return err;
	}
	memset(&attr, 0, sizeof(attr));
	err = ibv_query_coll_device(ctx, &attr);
	if (err) {
		fprintf(stderr, "%s: %s: ibv_query_coll_device: %s\n", prog, name, strerror(err));
	} else {
		printf("hca_id:\t%s\n", name);
		print_device_attr(&attr);
		for (unsigned int p = 1; p <= attr.phys_port_cnt && !err; p++)
			err = print_port(ctx, name, (uint8_t)p);
		printf("\n");
	}
	cerr = ibv_close_coll_device(ctx);
	if (cerr) {
		fprintf(stderr, "%s: %s: ibv_close_coll_device: %s\n", prog, name, strerror(cerr));
		if (!err)
			err = cerr;
	}
	return err;
}

static int print_config(void)
{
	int err;

	fflush(stdout);
	err = ibv_coll_print_config(stdout);
	if (err)
		fprintf(stderr, "%s: ibv_coll_print_config: %s\n", prog, strerror(err));
	return err;
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{"ib-dev", required_argument, NULL, 'd'},
		{"list", no_argument, NULL, 'l'},
		{"verbose", no_argument, NULL, 'v'},
		{"config", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *ib_devname = NULL;
	int list_only = 0, verbose = 0, config_only = 0;
	struct ibv_coll_device **list;
	int num = 0, failed = 0, found = 0;

	for (;;) {
		int c = getopt_long(argc, argv, "d:lvchV", longopts, NULL);

		if (c == -1)
			break;
		switch (c) {
		case 'd': ib_devname = optarg; break;
		case 'l': list_only = 1; break;
		case 'v': verbose = 1; break;
		case 'c': config_only = 1; break;
		case 'h': usage(stdout); return 0;
		case 'V': return ibvc_print_version(prog, ibv_coll_version());
		default: usage(stderr); return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		usage(stderr);
		return 1;
	}

	if (config_only)
		return print_config() ? 1 : 0;

	errno = 0;
	list = ibv_get_coll_device_list(&num);
	if (!list) {
		fprintf(stderr, "%s: ibv_get_coll_device_list: %s\n", prog,
			strerror(errno ? errno : EIO));
		return 1;
	}
	if (num == 0) {
		fprintf(stderr, "%s: no ibv_coll devices found\n", prog);
		ibv_free_coll_device_list(list);
		return 1;
	}

	for (int i = 0; i < num; i++) {
		const char *name = ibv_get_coll_device_name(list[i]);

		if (ib_devname && (!name || strcmp(name, ib_devname) != 0))
			continue;
		found++;
		if (list_only) {
			printf("%s\n", name ? name : "(unnamed)");
			continue;
		}
		if (print_device(list[i]))
			failed = 1;
	}
	ibv_free_coll_device_list(list);

	if (ib_devname && !found) {
		fprintf(stderr, "%s: device '%s' not found\n", prog, ib_devname);
		return 1;
	}
	if (verbose && !list_only && print_config())
		failed = 1;
	if (fflush(stdout) != 0) {
		fprintf(stderr, "%s: writing the output: %s\n", prog, strerror(errno));
		failed = 1;
	}
	return failed ? 1 : 0;
}
