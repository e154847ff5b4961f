/*
 * rc_bw.h - what the modules of ibv_coll_rc_bw share: options, the
 * test's objects, and the side channel's and device's functions
 * (rc_bw_dev.c).  See ibv_coll_rc_bw.c for the program.
 */
#ifndef IBVC_RC_BW_H
#define IBVC_RC_BW_H


#include <ibv_coll/ibv_coll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROG "ibv_coll_rc_bw"
#define MAX_QPS 16
#define STALL_NS 10000000000ll /* no completion this long: the peer is gone */
#define BUF_CAP (64ull << 20)  /* slots per QP are cut to keep a buffer under this */
#define LINE 512

enum test { TEST_WRITE, TEST_SEND };

struct opts {
	const char *server; /* NULL: this side is the server */
	const char *dev;
	unsigned tcp_port, ib_port, gid_idx, mtu, depth, qps, iters, duration;
	size_t size;
	int all, gbits;
	enum test test;
};

struct remote {
	uint32_t qpn, psn, rkey;
	uint16_t udp_port;
	union ibv_gid gid;
	uint64_t addr;
};

struct bw {
	struct ibv_coll_context *ctx;
	struct ibv_coll_pd *pd;
	struct ibv_coll_cq *cq;
	struct ibv_coll_mr *mr;
	struct ibv_coll_qp *qp[MAX_QPS];
	struct ibv_coll_port_attr port;
	union ibv_gid gid;
	uint32_t psn[MAX_QPS];
	uint8_t *buf;
	size_t slot_len, nslots; /* per QP: nslots slots of slot_len bytes */
	uint64_t sent[MAX_QPS];	 /* sends (client) or receives (server) ever posted per QP */
	uint64_t got[MAX_QPS];	 /* server: messages that landed per QP, every size */
	struct remote rem[MAX_QPS];
	int sock;
};

/* rc_bw_dev.c: helpers, the check pattern, the TCP side channel, the device. */
int64_t now_ns(void);
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t pat_word(size_t size, unsigned q, size_t slot, size_t i);
uint8_t *slot_at(struct bw *b, unsigned q, size_t s);
void pat_fill(uint8_t *p, size_t size, unsigned q, size_t slot);
int pat_ok(const uint8_t *p, size_t size, unsigned q, size_t slot);
int say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hear(int fd, char *line, int timeout_ms);
int tcp_open(const char *host, unsigned port);
unsigned mtu_bytes(enum ibv_mtu m);
enum ibv_mtu mtu_enum(unsigned bytes);
int bw_open(struct bw *b, const struct opts *o);
int bw_setup(struct bw *b, const struct opts *o, size_t max_size);
int bw_connect(struct bw *b, const struct opts *o, unsigned q);
void bw_close(struct bw *b, unsigned qps);
int swap_qps(struct bw *b, const struct opts *o);

#endif
