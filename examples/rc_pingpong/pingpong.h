/*
 * pingpong.h - what the modules of ibv_coll_rc_pingpong share: options,
 * the peer's description, the test's objects, and each module's functions.
 * See ibv_coll_rc_pingpong.c for the program.
 */
#ifndef IBVC_PINGPONG_H
#define IBVC_PINGPONG_H


#include <ibv_coll/ibv_coll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TCP_PORT 18515
#define DEFAULT_SIZE 4096
#define DEFAULT_RX_DEPTH 500
#define DEFAULT_ITERS 1000
/* No completion, no answer from the peer, for this long: give up. */
#define TIMEOUT_MS 10000
/* How often a busy-polling side looks at the TCP connection. */
#define PEER_CHECK_NS 50000000ll
#define MAX_WC 16
#define LINE_MAX_LEN 256

/* QP settings the brief of this example fixes. */
#define QP_TIMEOUT 14
#define QP_RETRY_CNT 7
#define QP_RNR_RETRY 7
#define QP_MIN_RNR_TIMER 12

enum wr_kind {
	WRID_RECV = 1,
	WRID_SEND = 2,
};

static const char prog[] = "ibv_coll_rc_pingpong";

struct options {
	const char *servername; /* NULL: this side is the server */
	const char *ib_devname;
	unsigned int tcp_port;
	int ib_port;
	unsigned int size;
	unsigned int mtu; /* bytes; 0: the port's active MTU */
	int rx_depth;
	int iters;
	int gid_idx;
	int use_event;
	int chk;
};

/* What one side tells the other. */
struct dest {
	uint32_t qpn;
	uint32_t psn;
	unsigned int udp_port;
	union ibv_gid gid;
	unsigned int size;
	int iters;
	unsigned int mtu;
	int chk;
};

struct pingpong {
	struct ibv_coll_context *ctx;
	struct ibv_coll_comp_channel *channel;
	struct ibv_coll_pd *pd;
	struct ibv_coll_mr *mr;
	struct ibv_coll_cq *cq;
	struct ibv_coll_qp *qp;
	void *buf;
	size_t buf_len;
	uint8_t *sbuf; /* what this side sends */
	uint8_t *rbuf; /* where every receive lands */
	struct ibv_coll_port_attr port_attr;
	struct ibv_coll_device_attr dev_attr;
	union ibv_gid gid;
	uint32_t psn;
	int sock;	/* the TCP connection to the peer, or -1 */
	int watch_sock; /* look for the peer going away while the test runs */
	int routs;	/* receives posted and not yet completed */
};

/* pp_util.c: helpers and the check pattern (-c). */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t now_ns(void);
int ms_left(int64_t deadline);
int parse_uint(const char *s, unsigned long max, unsigned long *out);
enum ibv_mtu mtu_to_enum(unsigned int bytes);
unsigned int mtu_from_enum(enum ibv_mtu m);
int gid_is_v4(const union ibv_gid *gid);
void gid_to_str(const union ibv_gid *gid, char *buf, size_t len);
uint64_t pattern_word(uint64_t seed, uint64_t index);
uint64_t pattern_seed(int n, int from_client);
void pattern_fill(uint8_t *buf, size_t len, uint64_t seed);
size_t pattern_check(const uint8_t *buf, size_t len, uint64_t seed);

/* pp_oob.c: the TCP exchange with the peer. */
int write_all(int fd, const char *buf, size_t len);
int read_line(int fd, char *buf, size_t cap, int timeout_ms, const char *what);
int tcp_connect(const char *host, unsigned int port);
int tcp_listen(unsigned int port);
int tcp_accept(int lfd, unsigned int port);
int send_dest(int fd, const struct dest *d);
int recv_dest(int fd, struct dest *d);
void refuse(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int check_peer(struct pingpong *pp);

/* pp_verbs.c: the verbs objects, posting and waiting for completions. */
struct ibv_coll_device *pick_device(struct ibv_coll_device **list, int num, const char *name);
void drain_events(struct pingpong *pp);
int pp_close(struct pingpong *pp);
int post_recvs(struct pingpong *pp, unsigned int size, int n);
int post_send(struct pingpong *pp, unsigned int size);
int pp_init(struct pingpong *pp, struct ibv_coll_device *dev, struct options *o);
int pp_connect(struct pingpong *pp, const struct options *o, const struct dest *rem,
	       unsigned int mtu);
void timeout_message(void);
int wait_poll(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline);
int wait_event(struct pingpong *pp, struct ibv_coll_wc *wc, int64_t deadline);

#endif
