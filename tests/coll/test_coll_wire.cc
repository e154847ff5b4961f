// The collective protocol on the wire, against a peer written here from
// the specification: this test plays node 1 of a two-node ring job with a
// plain UDP socket, builds and checks every packet itself (BTH, CETH,
// ICRC by the reference implementation), sends forged and damaged packets
// that must be dropped and counted, and checks that a repeated partial is
// answered with the result and never reduced twice.
#include "ref_icrc.h"

#include <ibv_coll/ibv_coll.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace ibvc_test;

namespace {

uint32_t be32(const uint8_t *p)
{
	return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
uint64_t be64(const uint8_t *p)
{
	return uint64_t(be32(p)) << 32 | be32(p + 4);
}
void put32(std::vector<uint8_t> &v, uint32_t x)
{
	for (int s = 24; s >= 0; s -= 8)
		v.push_back(uint8_t(x >> s));
}
void put64(std::vector<uint8_t> &v, uint64_t x)
{
	put32(v, uint32_t(x >> 32));
	put32(v, uint32_t(x));
}

// The CETH as ibv_coll_wire(7) lays it out.
struct Ceth {
	uint8_t coll = 0x40, op = 0, dtype = 2, flags = 0, status = 0, phase = 1;
	uint16_t src_node = 1;
	uint32_t jid = 9, mid = 1, sid = 0;
	uint16_t seg = 0, len = 0;
	uint64_t node_map = 0, rank_map = 0, key = 0; // ring: no number on the hop (rank_map)
	uint32_t inc = 1;			      // the device's QP was given its job once
	uint32_t seq = 0;
	uint32_t hold = 0, queue = 0;
};

struct Packet {
	uint8_t opcode;
	uint32_t dqpn, psn;
	Ceth h;
	std::vector<uint8_t> payload;
	bool icrc_ok;
};

const uint8_t kLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
constexpr uint64_t kKey = 0xfeedbeefcafef00dull;
constexpr uint32_t kFakeQpn = 0x99;

class Fake {
public:
	explicit Fake(uint16_t port = 0)
	{
		fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = htons(port);
		bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof(a));
		socklen_t l = sizeof(a);
		getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &l);
		port_ = ntohs(a.sin_port);
	}
	~Fake() { close(fd_); }
	uint16_t port() const { return port_; }

	void send(uint16_t to_port, uint8_t opcode, uint32_t dqpn, const Ceth &h,
		  const std::vector<uint8_t> &payload, bool corrupt_icrc = false,
		  int extra_payload = 0)
	{
		std::vector<uint8_t> r;
		uint32_t pad = (4 - ((payload.size() + size_t(extra_payload)) & 3)) & 3;
		r.push_back(opcode);
		r.push_back(uint8_t(0x40 | pad << 4));
		r.push_back(0xff);
		r.push_back(0xff);
		put32(r, dqpn & 0xffffff);
		put32(r, h.sid & 0xffffff);
		r.push_back(h.coll);
		r.push_back(h.op);
		r.push_back(h.dtype);
		r.push_back(h.flags);
		r.push_back(h.status);
		r.push_back(h.phase);
		r.push_back(uint8_t(h.src_node >> 8));
		r.push_back(uint8_t(h.src_node));
		put32(r, h.jid);
		put32(r, h.mid);
		put32(r, h.sid);
		r.push_back(uint8_t(h.seg >> 8));
		r.push_back(uint8_t(h.seg));
		r.push_back(uint8_t(h.len >> 8));
		r.push_back(uint8_t(h.len));
		put64(r, h.node_map);
		put64(r, h.rank_map);
		put64(r, h.key);
		put32(r, h.inc);
		put32(r, h.seq);
		put32(r, h.hold);
		put32(r, h.queue);
		r.insert(r.end(), payload.begin(), payload.end());
		r.insert(r.end(), size_t(extra_payload) + pad, 0);
		uint32_t crc = ref_icrc(false, kLo, kLo, port_, to_port, r);
		if (corrupt_icrc)
			crc ^= 1;
		for (int i = 0; i < 4; i++)
			r.push_back(uint8_t(crc >> (8 * i)));
		sockaddr_in a{};
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = htons(to_port);
		sendto(fd_, r.data(), r.size(), 0, reinterpret_cast<sockaddr *>(&a), sizeof(a));
	}

	// The next packet from the device (the library's engine thread sends
	// it): false on timeout.
	bool recv(Packet *p, uint16_t from_port, int timeout_ms = 3000)
	{
		uint8_t b[9000];
		pollfd pf{fd_, POLLIN, 0};
		if (poll(&pf, 1, timeout_ms) != 1)
			return false;
		sockaddr_in a{};
		socklen_t l = sizeof(a);
		ssize_t n = recvfrom(fd_, b, sizeof(b), 0, reinterpret_cast<sockaddr *>(&a), &l);
		if (n < 12 + 64 + 4)
			return false;
		p->opcode = b[0];
		p->dqpn = be32(b + 4) & 0xffffff;
		p->psn = be32(b + 8) & 0xffffff;
		const uint8_t *c = b + 12;
		Ceth &h = p->h;
		h.coll = c[0];
		h.op = c[1];
		h.dtype = c[2];
		h.flags = c[3];
		h.status = c[4];
		h.phase = c[5];
		h.src_node = uint16_t(c[6] << 8 | c[7]);
		h.jid = be32(c + 8);
		h.mid = be32(c + 12);
		h.sid = be32(c + 16);
		h.seg = uint16_t(c[20] << 8 | c[21]);
		h.len = uint16_t(c[22] << 8 | c[23]);
		h.node_map = be64(c + 24);
		h.rank_map = be64(c + 32);
		h.key = be64(c + 40);
		h.inc = be32(c + 48);
		h.seq = be32(c + 52);
		h.hold = be32(c + 56);
		h.queue = be32(c + 60);
		uint32_t pad = (b[1] >> 4) & 3;
		p->payload.assign(b + 76, b + n - 4 - pad);
		std::vector<uint8_t> roce(b, b + n - 4);
		uint32_t crc = uint32_t(b[n - 4]) | uint32_t(b[n - 3]) << 8 |
			       uint32_t(b[n - 2]) << 16 | uint32_t(b[n - 1]) << 24;
		p->icrc_ok = crc == ref_icrc(false, kLo, kLo, from_port, port_, roce) &&
			     ntohs(a.sin_port) == from_port;
		return true;
	}

private:
	int fd_;
	uint16_t port_;
};

std::vector<uint8_t> i32(std::initializer_list<int32_t> v)
{
	std::vector<uint8_t> b;
	for (int32_t x : v) {
		uint8_t t[4];
		memcpy(t, &x, 4); // the device reduces host-order elements
		b.insert(b.end(), t, t + 4);
	}
	return b;
}

int32_t first_i32(const std::vector<uint8_t> &b)
{
	int32_t x = 0;
	if (b.size() >= 4)
		memcpy(&x, b.data(), 4);
	return x;
}

// crxe_lo with a retransmission timeout longer than the tests' waits, and
// messages of up to xchg_bytes by the pairwise exchange.
ibv_coll_context *open_lo(const char *xchg_bytes)
{
	setenv("IBV_COLL_EMU_COLL_RTO_US", "30000", 1);
	setenv("IBV_COLL_EMU_XCHG_BYTES", xchg_bytes, 1);
	int n;
	ibv_coll_device **l = ibv_get_coll_device_list(&n);
	ibv_coll_context *ctx = nullptr;
	for (int i = 0; l && i < n && !ctx; i++)
		if (!strcmp(ibv_get_coll_device_name(l[i]), "crxe_lo"))
			ctx = ibv_open_coll_device(l[i]);
	ibv_free_coll_device_list(l);
	unsetenv("IBV_COLL_EMU_COLL_RTO_US");
	unsetenv("IBV_COLL_EMU_XCHG_BYTES");
	return ctx;
}

} // namespace

TEST(CollWire, RingPeerForgeryDuplicatesAndRetransmission)
{
	// Small messages too round the ring (the exchange off).
	ibv_coll_context *ctx = open_lo("0");
	ASSERT_NE(ctx, nullptr);
	ibv_coll_pd *pd = ibv_alloc_coll_pd(ctx);
	ibv_coll_cq *cq = ibv_create_coll_cq(ctx, 16, nullptr, nullptr, 0);
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = 8;
	ia.cap.max_send_sge = 1;
	ibv_coll_qp *qp = ibv_create_coll_qp(pd, &ia);
	ASSERT_NE(qp, nullptr);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(ctx, 1, &pa), 0);
	const uint16_t dev_port = pa.udp_port;

	Fake fake, stranger;
	ibv_coll_member m[2]{};
	memcpy(m[0].gid.raw, kLo, 16);
	m[0].udp_port = dev_port;
	m[0].num_ranks = 1;
	m[0].qp_num = qp->qp_num;
	memcpy(m[1].gid.raw, kLo, 16);
	m[1].udp_port = fake.port();
	m[1].num_ranks = 1;
	m[1].qp_num = kFakeQpn;
	ibv_coll_job_attr job{};
	job.jid = 9;
	job.node_index = 0;
	job.num_nodes = 2;
	job.members = m;
	job.seg_count = 8;
	job.job_key = kKey;
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT), 0);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.job = &job;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a,
				     IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU),
		  0);
	a.qp_state = IBV_QPS_RTS;
	ASSERT_EQ(ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE), 0);

	int32_t buf[4] = {10, 20, -1, -1}; // source [10, 20], destination after
	ibv_coll_mr *mr = ibv_reg_coll_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	ibv_sge s{reinterpret_cast<uint64_t>(&buf[0]), 8, mr->lkey};
	ibv_sge d{reinterpret_cast<uint64_t>(&buf[2]), 8, mr->lkey};
	ibv_coll_send_wr wr{}, *bad;
	wr.wr_id = 1;
	wr.opcode = IBV_COLL_WR_ALLREDUCE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.wr.coll.dst_list = &d;
	wr.wr.coll.count = 2;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	ASSERT_EQ(ibv_post_coll_send(qp, &wr, &bad), 0);
	ibv_coll_wc wc;
	ibv_poll_coll_cq(cq, 1, &wc); // lend the thread once

	// Chunk 0 (element 0) starts at node 0: its partial comes to us.
	Packet p;
	ASSERT_TRUE(fake.recv(&p, dev_port));
	EXPECT_TRUE(p.icrc_ok) << "the device's ICRC fails the reference";
	EXPECT_EQ(p.opcode, 0xe0);
	EXPECT_EQ(p.dqpn, kFakeQpn);
	EXPECT_EQ(p.h.coll, 0x40);
	EXPECT_EQ(p.h.op, IBV_COLL_OP_SUM);
	EXPECT_EQ(p.h.dtype, IBV_COLL_DTYPE_INT32);
	EXPECT_EQ(p.h.jid, 9u);
	EXPECT_EQ(p.h.mid, 1u);
	EXPECT_EQ(p.h.sid, 0u);
	EXPECT_EQ(p.h.phase, 1);
	EXPECT_EQ(p.h.src_node, 0);
	EXPECT_EQ(p.h.node_map, 1u);
	EXPECT_EQ(p.h.key, kKey);
	EXPECT_EQ(p.h.inc, 1u) << "the QP's first job is incarnation 1";
	EXPECT_EQ(p.h.seq, 0u) << "seq numbers switch-path blocks only";
	EXPECT_EQ(p.h.hold, 0u) << "a block's first sender held it nowhere";
	EXPECT_EQ(p.h.queue, 0u);
	EXPECT_EQ(p.h.len, 4);
	EXPECT_EQ(p.h.rank_map, 1u) << "the hop's first number (0), plus 1";
	EXPECT_EQ(first_i32(p.payload), 10);
	uint64_t top = p.h.rank_map; // the highest number (plus 1) the device sent us

	// Forged or damaged partials of chunk 1 (element 1): all dropped.
	Ceth h;
	h.sid = 1;
	h.len = 4;
	h.node_map = 2; // node 1's data only
	h.key = kKey;
	ibv_coll_counters c0{}, c1{};
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c0), 0);
	fake.send(dev_port, 0xe0, qp->qp_num, h, i32({1000}), true); // bad ICRC
	Ceth x = h;
	x.key ^= 1;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // wrong key
	x = h;
	x.jid = 10;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // wrong job
	x = h;
	x.sid = 7;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // no such block
	x = h;
	x.node_map = 3;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // claims node 0's data
	x = h;
	x.phase = 2;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // impossible hop
	x = h;
	x.src_node = 0;
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000})); // poses as node 0
	x = h;
	x.src_node = 0xffff; // poses as a switch: a ring job has none
	fake.send(dev_port, 0xe0, qp->qp_num, x, i32({1000}));
	fake.send(dev_port, 0xe0, qp->qp_num, h, i32({1000}), false, 4); // longer than its len
	stranger.send(dev_port, 0xe0, qp->qp_num, h, i32({1000}));	 // not a member's address
	usleep(100000);
	ibv_poll_coll_cq(cq, 1, &wc);
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c1), 0);
	EXPECT_EQ(c1.rx_icrc_errors - c0.rx_icrc_errors, 1u);
	EXPECT_EQ(c1.coll_bad_key - c0.coll_bad_key, 1u);
	EXPECT_EQ(c1.coll_bad_job - c0.coll_bad_job, 1u);
	EXPECT_EQ(c1.coll_bad_block - c0.coll_bad_block, 1u);
	EXPECT_EQ(c1.coll_bad_node - c0.coll_bad_node, 3u);
	EXPECT_EQ(c1.coll_malformed - c0.coll_malformed, 3u);
	EXPECT_EQ(c1.coll_reductions - c0.coll_reductions, 0u) << "a forged block was reduced";
	// QUERY: nothing was accepted.
	ibv_coll_send_wr q{};
	q.opcode = IBV_COLL_WR_QUERY;
	q.wr.coll.mid = 1;
	ASSERT_EQ(ibv_post_coll_send(qp, &q, &bad), 0);
	while (ibv_poll_coll_cq(cq, 1, &wc) == 0)
		;
	EXPECT_EQ(wc.msg_state, IBV_COLL_MSG_ACTIVE);
	EXPECT_EQ(wc.blocks_done, 0u);
	EXPECT_EQ(wc.blocks_total, 2u);

	// The real partial: node 0 finishes chunk 1 (20 + 5) and sends us the
	// result.  Node 0 may also have sent its chunk-0 partial again by now.
	fake.send(dev_port, 0xe0, qp->qp_num, h, i32({5}));
	auto next_result = [&](uint32_t sid, Packet *r) {
		for (int i = 0; i < 20; i++) {
			if (!fake.recv(r, dev_port))
				return false;
			top = std::max(top, r->h.rank_map);
			if (r->opcode == 0xe1 && r->h.sid == sid)
				return true;
			EXPECT_EQ(r->opcode, 0xe0);
			EXPECT_TRUE(r->h.flags & 2) << "a repeated partial is flagged";
		}
		return false;
	};
	ASSERT_TRUE(next_result(1, &p));
	EXPECT_TRUE(p.icrc_ok);
	EXPECT_EQ(p.h.phase, 1);
	EXPECT_EQ(p.h.node_map, 3u);
	EXPECT_EQ(first_i32(p.payload), 25);
	// The same partial again: answered with the same result, not reduced.
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c0), 0);
	fake.send(dev_port, 0xe0, qp->qp_num, h, i32({5}));
	ASSERT_TRUE(next_result(1, &p));
	EXPECT_EQ(first_i32(p.payload), 25) << "reduced twice";
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c1), 0);
	EXPECT_EQ(c1.coll_reductions, c0.coll_reductions);
	EXPECT_GE(c1.coll_retrans_result, c0.coll_retrans_result + 1);

	// We finish chunk 0 (10 + 7); node 0 writes it and passes it back to us.
	Ceth r0;
	r0.sid = 0;
	r0.len = 4;
	r0.node_map = 3;
	r0.key = kKey;
	fake.send(dev_port, 0xe1, qp->qp_num, r0, i32({17}));
	ASSERT_TRUE(next_result(0, &p));
	EXPECT_EQ(p.h.phase, 2) << "the result's second hop";
	EXPECT_TRUE(p.payload.empty()) << "the hop home is a token: node 0 has the data";
	// Node 0's own result comes home through us: hop 2, a token.  One
	// carrying data is refused (counted malformed) and does not complete.
	Ceth r1 = r0;
	r1.sid = 1;
	r1.phase = 2;
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c0), 0);
	fake.send(dev_port, 0xe1, qp->qp_num, r1, i32({25}));
	for (int i = 0; i < 200 && c1.coll_malformed == c0.coll_malformed; i++) {
		usleep(1000);
		ASSERT_EQ(ibv_query_coll_counters(ctx, &c1), 0);
	}
	EXPECT_EQ(c1.coll_malformed, c0.coll_malformed + 1);
	r1.len = 0;
	fake.send(dev_port, 0xe1, qp->qp_num, r1, {});
	// Every result is here, but the device ends the message only once we
	// ACK what it sent us (ACK flagged HOP: we have every number below
	// sid).
	usleep(50000);
	EXPECT_EQ(ibv_poll_coll_cq(cq, 1, &wc), 0) << "complete before its hop was acknowledged";
	Ceth hack = r0;
	hack.flags = 0x20;
	hack.phase = 0;
	hack.len = 0;
	hack.sid = uint32_t(top);
	fake.send(dev_port, 0xe2, qp->qp_num, hack, {});
	wc = {};
	for (int i = 0; i < 5000000 && ibv_poll_coll_cq(cq, 1, &wc) == 0; i++)
		;
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(buf[2], 17);
	EXPECT_EQ(buf[3], 25);

	// Another incarnation's packets are never taken.  One from an earlier
	// incarnation (a member not yet reset) is answered with an ABORT in
	// that incarnation, flagged SUPERSEDED (0x10), so the sender need not
	// wait for its timeout.
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c0), 0);
	Ceth old = h;
	old.inc = 0;
	old.mid = 7;
	fake.send(dev_port, 0xe0, qp->qp_num, old, i32({1000}));
	ASSERT_TRUE(fake.recv(&p, dev_port));
	EXPECT_TRUE(p.icrc_ok);
	EXPECT_EQ(p.opcode, 0xe3);
	EXPECT_EQ(p.h.inc, 0u) << "in the receiver's incarnation";
	EXPECT_EQ(p.h.mid, 7u);
	EXPECT_EQ(p.h.flags, 0x10);
	EXPECT_EQ(p.h.status, IBV_COLL_STATUS_REMOTE_ABORT);
	EXPECT_TRUE(p.payload.empty());
	// One from a later incarnation: this QP's is over, and its next
	// collective fails at once (REMOTE_ABORT), telling us so.
	Ceth later = h;
	later.inc = 2;
	later.mid = 1;
	fake.send(dev_port, 0xe0, qp->qp_num, later, i32({1000}));
	for (int i = 0; i < 200 && c1.coll_stale < c0.coll_stale + 2; i++) {
		usleep(1000);
		ASSERT_EQ(ibv_query_coll_counters(ctx, &c1), 0);
	}
	EXPECT_EQ(c1.coll_stale, c0.coll_stale + 2);
	EXPECT_EQ(c1.coll_reductions, c0.coll_reductions) << "another incarnation's block reduced";
	wr.wr_id = 2;
	ASSERT_EQ(ibv_post_coll_send(qp, &wr, &bad), 0);
	wc = {};
	for (int i = 0; i < 5000000 && ibv_poll_coll_cq(cq, 1, &wc) == 0; i++)
		;
	EXPECT_EQ(wc.wr_id, 2u);
	EXPECT_EQ(wc.coll_status, IBV_COLL_STATUS_REMOTE_ABORT);
	ASSERT_TRUE(fake.recv(&p, dev_port));
	EXPECT_EQ(p.opcode, 0xe3);
	EXPECT_EQ(p.h.inc, 1u);
	EXPECT_EQ(p.h.mid, 2u);

	ibv_destroy_coll_qp(qp);
	ibv_dereg_coll_mr(mr);
	ibv_destroy_coll_cq(cq);
	ibv_dealloc_coll_pd(pd);
	ibv_close_coll_device(ctx);
}

namespace {

// A collective QP of a two-node ring job on ctx: this device node 0, the
// fake node 1.
ibv_coll_qp *ring_job_qp(ibv_coll_pd *pd, ibv_coll_cq *cq, uint16_t dev_port, const Fake &peer,
			 uint32_t jid, uint64_t key, uint32_t seg_base)
{
	ibv_coll_qp_init_attr ia{};
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_COLL_QPT_COLL;
	ia.cap.max_send_wr = 8;
	ia.cap.max_send_sge = 1;
	ibv_coll_qp *qp = ibv_create_coll_qp(pd, &ia);
	if (!qp)
		return nullptr;
	ibv_coll_member m[2]{};
	memcpy(m[0].gid.raw, kLo, 16);
	m[0].udp_port = dev_port;
	m[0].num_ranks = 1;
	m[0].qp_num = qp->qp_num;
	memcpy(m[1].gid.raw, kLo, 16);
	m[1].udp_port = peer.port();
	m[1].num_ranks = 1;
	m[1].qp_num = kFakeQpn;
	ibv_coll_job_attr job{};
	job.jid = jid;
	job.num_nodes = 2;
	job.members = m;
	job.seg_base = seg_base; // jobs on one device take disjoint Seg ranges
	job.seg_count = 8;
	job.job_key = key;
	ibv_coll_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	int err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_PORT);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.job = &job;
	if (!err)
		err = ibv_modify_coll_qp(
			qp, &a, IBV_COLL_QP_STATE | IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU);
	a.qp_state = IBV_QPS_RTS;
	if (!err)
		err = ibv_modify_coll_qp(qp, &a, IBV_COLL_QP_STATE);
	if (err) {
		ibv_destroy_coll_qp(qp);
		return nullptr;
	}
	return qp;
}

uint64_t nic_drops(const ibv_coll_counters &c)
{
	return c.rx_icrc_errors + c.rx_malformed + c.rx_no_qp + c.rx_bad_source + c.rx_bad_state +
	       c.coll_bad_key + c.coll_bad_job + c.coll_bad_node + c.coll_malformed;
}

} // namespace

// Two jobs on one device.  One datagram of each class that the NIC drops
// in front of its transports moves exactly its counter, and rx_packets by
// exactly what was sent (an empty datagram included); packets of the
// other job, with the other job's key or from an address that is not a
// member change neither job: job 9 then completes with the exact result
// and job 10 has taken in nothing.
TEST(CollWire, EveryDatagramCountedAndTenantsIsolated)
{
	// Small messages too round the ring (the exchange off).
	ibv_coll_context *ctx = open_lo("0");
	ASSERT_NE(ctx, nullptr);
	ibv_coll_pd *pd = ibv_alloc_coll_pd(ctx);
	ibv_coll_cq *cq = ibv_create_coll_cq(ctx, 16, nullptr, nullptr, 0);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(ctx, 1, &pa), 0);
	const uint16_t dev_port = pa.udp_port;
	constexpr uint64_t kKey2 = 0x0123456789abcdefull;
	Fake fa, fb, stranger;
	ibv_coll_qp *qa = ring_job_qp(pd, cq, dev_port, fa, 9, kKey, 0);
	ibv_coll_qp *qb = ring_job_qp(pd, cq, dev_port, fb, 10, kKey2, 8);
	ASSERT_NE(qa, nullptr);
	ASSERT_NE(qb, nullptr);

	int32_t ba[4] = {10, 20, -1, -1}, bb[4] = {1, 2, -1, -1};
	ibv_coll_mr *ma = ibv_reg_coll_mr(pd, ba, sizeof(ba), IBV_ACCESS_LOCAL_WRITE);
	ibv_coll_mr *mb = ibv_reg_coll_mr(pd, bb, sizeof(bb), IBV_ACCESS_LOCAL_WRITE);
	ibv_sge sa{reinterpret_cast<uint64_t>(&ba[0]), 8, ma->lkey};
	ibv_sge da{reinterpret_cast<uint64_t>(&ba[2]), 8, ma->lkey};
	ibv_sge sb{reinterpret_cast<uint64_t>(&bb[0]), 8, mb->lkey};
	ibv_sge db{reinterpret_cast<uint64_t>(&bb[2]), 8, mb->lkey};
	ibv_coll_send_wr wr{}, *bad;
	wr.opcode = IBV_COLL_WR_ALLREDUCE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.num_sge = 1;
	wr.wr.coll.count = 2;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	wr.wr_id = 1;
	wr.sg_list = &sa;
	wr.wr.coll.dst_list = &da;
	ASSERT_EQ(ibv_post_coll_send(qa, &wr, &bad), 0);
	wr.wr_id = 2;
	wr.sg_list = &sb;
	wr.wr.coll.dst_list = &db;
	ASSERT_EQ(ibv_post_coll_send(qb, &wr, &bad), 0);
	ibv_coll_wc wc;
	ibv_poll_coll_cq(cq, 1, &wc);
	Packet p;
	ASSERT_TRUE(fa.recv(&p, dev_port)); // node 0's partial of chunk 0, each job
	ASSERT_TRUE(fb.recv(&p, dev_port));

	// Node 1's partial of chunk 1 for job 9, and forgeries of it.
	Ceth h;
	h.sid = 1;
	h.len = 4;
	h.node_map = 2;
	h.key = kKey;
	ibv_coll_counters c0 = {}, c1 = {};
	c0.comp_mask = IBV_COLL_COUNTERS_EXT2; // with the collective accounting
	ASSERT_EQ(ibv_query_coll_counters(ctx, &c0), 0);
	c1 = c0;
	sockaddr_in to{};
	to.sin_family = AF_INET;
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	to.sin_port = htons(dev_port);
	int raw = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	const uint8_t junk[5] = {0xe0, 0x40, 0xff, 0xff, 0};
	sendto(raw, junk, 0, 0, reinterpret_cast<sockaddr *>(&to), sizeof(to)); // empty
	sendto(raw, junk, 5, 0, reinterpret_cast<sockaddr *>(&to), sizeof(to)); // too short
	close(raw);
	fa.send(dev_port, 0xe0, qa->qp_num, h, i32({1000}), true);     // bad ICRC: rx_icrc_errors
	fa.send(dev_port, 0x04, qa->qp_num, h, i32({1000}));	       // RC SEND to a coll QP
	fa.send(dev_port, 0x04, 0xabcdef, h, i32({1000}));	       // RC: no such QP
	fa.send(dev_port, 0xe0, 0xabcdef, h, i32({1000}));	       // collective: no such QP
	fa.send(dev_port, 0xe0, qa->qp_num, h, i32({1000}), false, 4); // longer than its len
	Ceth x = h;
	x.key = kKey2;
	fb.send(dev_port, 0xe0, qa->qp_num, x, i32({1000})); // job 10's key on job 9
	x = h;
	x.jid = 10;
	fa.send(dev_port, 0xe0, qa->qp_num, x, i32({1000})); // job 10's ID, job 9's key
	x.key = kKey2;
	fa.send(dev_port, 0xe0, qa->qp_num, x, i32({1000})); // job 10's packet at job 9's QP
	fb.send(dev_port, 0xe0, qa->qp_num, h, i32({1000})); // job 10's member as job 9's node 1
	stranger.send(dev_port, 0xe0, qa->qp_num, h, i32({1000})); // not a member at all
	x = h;
	x.jid = 9;
	x.key = kKey;
	fa.send(dev_port, 0xe0, qb->qp_num, x, i32({1000})); // job 9's packet at job 10's QP
	x = h;
	x.len = 0;
	fb.send(dev_port, 0xe3, qa->qp_num, x, {}); // ABORT of job 9 from job 10's member
	constexpr uint64_t kSent = 14;
	for (int i = 0; i < 2000 && c1.rx_packets - c0.rx_packets < kSent; i++) {
		usleep(1000);
		ibv_poll_coll_cq(cq, 1, &wc);
		ASSERT_EQ(ibv_query_coll_counters(ctx, &c1), 0);
	}
	EXPECT_EQ(c1.rx_packets - c0.rx_packets, kSent);
	EXPECT_EQ(c1.rx_malformed - c0.rx_malformed, 3u); // empty, short, RC at a coll QP
	EXPECT_EQ(c1.rx_icrc_errors - c0.rx_icrc_errors, 1u);
	EXPECT_EQ(c1.rx_no_qp - c0.rx_no_qp, 2u);
	EXPECT_EQ(c1.coll_malformed - c0.coll_malformed, 1u);
	EXPECT_EQ(c1.coll_bad_key - c0.coll_bad_key, 3u);
	EXPECT_EQ(c1.coll_bad_job - c0.coll_bad_job, 1u);
	EXPECT_EQ(c1.coll_bad_node - c0.coll_bad_node, 3u);
	EXPECT_EQ(c1.rx_packets - c0.rx_packets, nic_drops(c1) - nic_drops(c0))
		<< "a datagram counted nowhere or twice";
	EXPECT_EQ(c1.coll_reductions, c0.coll_reductions) << "a forged block was reduced";
	EXPECT_EQ(c1.coll_aborts_rcvd, c0.coll_aborts_rcvd);
	EXPECT_EQ(c1.coll_early, c0.coll_early);
	EXPECT_EQ(c1.coll_delivered, c0.coll_delivered) << "a forged packet was acted on";
	// Handed to a collective QP: the over-long one, the three wrong keys,
	// the wrong job and the three wrong nodes, and the one to no QP.
	EXPECT_EQ(c1.coll_rx_packets - c0.coll_rx_packets, 9u);
	EXPECT_EQ(c1.coll_host_dropped - c0.coll_host_dropped, 1u);
	EXPECT_EQ(ibv_poll_coll_cq(cq, 1, &wc), 0) << "a forged packet completed or aborted a job";

	// Job 9 completes with only its real member's data (as in the test
	// above): 10 + 7 and 20 + 5.
	fa.send(dev_port, 0xe0, qa->qp_num, h, i32({5}));
	uint64_t top = 0; // the highest number (plus 1) the device sent us
	auto next_result = [&](uint32_t sid, Packet *r) {
		for (int i = 0; i < 20; i++) {
			if (!fa.recv(r, dev_port))
				return false;
			top = std::max(top, r->h.rank_map);
			if (r->opcode == 0xe1 && r->h.sid == sid)
				return true;
		}
		return false;
	};
	ASSERT_TRUE(next_result(1, &p));
	EXPECT_EQ(first_i32(p.payload), 25);
	Ceth r0;
	r0.sid = 0;
	r0.len = 4;
	r0.node_map = 3;
	r0.key = kKey;
	fa.send(dev_port, 0xe1, qa->qp_num, r0, i32({17}));
	ASSERT_TRUE(next_result(0, &p));
	Ceth r1 = r0;
	r1.sid = 1;
	r1.phase = 2;
	r1.len = 0;
	fa.send(dev_port, 0xe1, qa->qp_num, r1, {});
	Ceth hack = r0; // we have every number the device sent us
	hack.flags = 0x20;
	hack.phase = 0;
	hack.len = 0;
	hack.sid = uint32_t(top);
	fa.send(dev_port, 0xe2, qa->qp_num, hack, {});
	wc = {};
	for (int i = 0; i < 5000000 && ibv_poll_coll_cq(cq, 1, &wc) == 0; i++)
		;
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(ba[2], 17);
	EXPECT_EQ(ba[3], 25);
	// Job 10 took in nothing.
	ibv_coll_send_wr q{};
	q.opcode = IBV_COLL_WR_QUERY;
	q.wr.coll.mid = 1;
	ASSERT_EQ(ibv_post_coll_send(qb, &q, &bad), 0);
	while (ibv_poll_coll_cq(cq, 1, &wc) == 0)
		;
	EXPECT_EQ(wc.msg_state, IBV_COLL_MSG_ACTIVE);
	EXPECT_EQ(wc.blocks_done, 0u);
	EXPECT_EQ(bb[2], -1);
	// Every collective packet handed to a QP, real or forged, is counted
	// once: acted on, or dropped for one reason.
	ibv_coll_counters e = {};
	e.comp_mask = IBV_COLL_COUNTERS_EXT2;
	ASSERT_EQ(ibv_query_coll_counters(ctx, &e), 0);
	EXPECT_EQ(e.coll_delivered, 4u); // node 1's partial, the two results and our ACK
	EXPECT_EQ(e.coll_rx_packets, e.coll_delivered + e.coll_duplicates + e.coll_stale +
					     e.coll_early + e.coll_early_dropped + e.coll_bad_key +
					     e.coll_bad_job + e.coll_bad_block + e.coll_bad_node +
					     e.coll_malformed + e.coll_host_dropped)
		<< "a collective packet counted nowhere or twice";

	ibv_destroy_coll_qp(qa);
	ibv_destroy_coll_qp(qb);
	ibv_dereg_coll_mr(ma);
	ibv_dereg_coll_mr(mb);
	ibv_destroy_coll_cq(cq);
	ibv_dealloc_coll_pd(pd);
	ibv_close_coll_device(ctx);
}

// A small allreduce between the device (node 0) and a peer played here,
// by the pairwise exchange: one XCHG each way carries the partial, one
// each way acknowledges it.  The device sends its partial again until it
// is acknowledged, and completes only then; acknowledges the peer's
// (again when it comes again, after completion too); keeps one of the next
// message until that starts; and drops forged and misdirected ones,
// counting each, without reducing them.
TEST(CollWire, ExchangePeerAcknowledgementsForgeriesAndTheNextMessage)
{
	setenv("IBV_COLL_EMU_COLL_PROBE_US", "100000", 1);
	ibv_coll_context *ctx = open_lo("64");
	unsetenv("IBV_COLL_EMU_COLL_PROBE_US");
	ASSERT_NE(ctx, nullptr);
	ibv_coll_pd *pd = ibv_alloc_coll_pd(ctx);
	ibv_coll_cq *cq = ibv_create_coll_cq(ctx, 16, nullptr, nullptr, 0);
	ibv_coll_port_attr pa;
	ASSERT_EQ(ibv_query_coll_port(ctx, 1, &pa), 0);
	const uint16_t dev_port = pa.udp_port;
	Fake fake;
	ibv_coll_qp *qp = ring_job_qp(pd, cq, dev_port, fake, 9, kKey, 0);
	ASSERT_NE(qp, nullptr);

	int32_t buf[4] = {10, 20, -1, -1}; // source, then destination
	ibv_coll_mr *mr = ibv_reg_coll_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	ibv_sge s{reinterpret_cast<uint64_t>(&buf[0]), 8, mr->lkey};
	ibv_sge d{reinterpret_cast<uint64_t>(&buf[2]), 8, mr->lkey};
	ibv_coll_send_wr wr{}, *bad;
	wr.opcode = IBV_COLL_WR_ALLREDUCE;
	wr.send_flags = IBV_COLL_SEND_SIGNALED;
	wr.sg_list = &s;
	wr.num_sge = 1;
	wr.wr.coll.dst_list = &d;
	wr.wr.coll.count = 2;
	wr.wr.coll.op = IBV_COLL_OP_SUM;
	wr.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	ibv_coll_wc wc{};
	auto post = [&](uint64_t id) {
		wr.wr_id = id;
		buf[2] = buf[3] = -1;
		ASSERT_EQ(ibv_post_coll_send(qp, &wr, &bad), 0);
		wc = {};
		ibv_poll_coll_cq(cq, 1, &wc); // lend the thread once (it may complete)
	};
	auto completes = [&](uint64_t id, int32_t e0, int32_t e1) {
		for (int i = 0; i < 3000 && !wc.wr_id && ibv_poll_coll_cq(cq, 1, &wc) == 0; i++)
			usleep(1000);
		EXPECT_EQ(wc.wr_id, id);
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
		EXPECT_TRUE(wc.wc_flags & IBV_COLL_WC_RING);
		EXPECT_EQ(buf[2], e0);
		EXPECT_EQ(buf[3], e1);
	};
	auto counters = [&] {
		ibv_coll_counters c{};
		EXPECT_EQ(ibv_query_coll_counters(ctx, &c), 0);
		return c;
	};

	// Message 1: our partial comes, phase 1 (two nodes: one phase).
	post(1);
	Packet p;
	ASSERT_TRUE(fake.recv(&p, dev_port));
	EXPECT_TRUE(p.icrc_ok);
	EXPECT_EQ(p.opcode, 0xe9);
	EXPECT_EQ(p.dqpn, kFakeQpn);
	EXPECT_EQ(p.h.mid, 1u);
	EXPECT_EQ(p.h.phase, 1);
	EXPECT_EQ(p.h.src_node, 0);
	EXPECT_EQ(p.h.flags, 0);
	EXPECT_EQ(p.payload, i32({10, 20}));

	// Forged and misdirected partials: counted, never reduced.  A
	// partial says its length in node_map (one piece here, sid 0).
	Ceth h;
	h.len = 8;
	h.node_map = 8;
	h.key = kKey;
	const ibv_coll_counters c0 = counters();
	Ceth x = h;
	x.phase = 0; // two nodes have no phase 0
	fake.send(dev_port, 0xe9, qp->qp_num, x, i32({1000, 1000}));
	x = h;
	x.phase = 2; // nor a phase 2
	fake.send(dev_port, 0xe9, qp->qp_num, x, i32({1000, 1000}));
	x = h;
	x.flags = 0x08; // an acknowledgement carries nothing
	fake.send(dev_port, 0xe9, qp->qp_num, x, i32({1000, 1000}));
	x = h;
	x.len = 4; // not the message's length
	fake.send(dev_port, 0xe9, qp->qp_num, x, i32({1000}));
	x = h;
	x.key ^= 1;
	fake.send(dev_port, 0xe9, qp->qp_num, x, i32({1000, 1000}));
	// The ring's packets of the same message: a ring partial (hop 1) and
	// a result's token coming home (hop 2).
	Ceth ring = h;
	ring.node_map = 2;
	fake.send(dev_port, 0xe0, qp->qp_num, ring, i32({1000, 1000}));
	ring.phase = 2;
	ring.node_map = 3;
	ring.len = 0;
	fake.send(dev_port, 0xe1, qp->qp_num, ring, {});
	// Not acknowledged, our partial comes again (after the probe time),
	// flagged a repeat.
	ASSERT_TRUE(fake.recv(&p, dev_port, 2000));
	EXPECT_EQ(p.opcode, 0xe9);
	EXPECT_EQ(p.h.flags, 2);
	EXPECT_EQ(p.payload, i32({10, 20}));
	ibv_coll_counters c1 = counters();
	EXPECT_EQ(c1.coll_bad_node - c0.coll_bad_node, 3u);
	EXPECT_EQ(c1.coll_bad_block - c0.coll_bad_block, 1u);
	EXPECT_EQ(c1.coll_bad_key - c0.coll_bad_key, 1u);
	EXPECT_EQ(c1.coll_malformed - c0.coll_malformed, 2u);
	EXPECT_EQ(c1.coll_reductions, c0.coll_reductions);
	EXPECT_EQ(buf[2], -1) << "completed on a forged partial";

	// We acknowledge it and send ours: the device acknowledges ours and
	// completes (10 + 1, 20 + 2).
	Ceth ack = h;
	ack.flags = 0x08;
	ack.len = 0;
	ack.node_map = 1; // the pieces here: the one
	fake.send(dev_port, 0xe9, qp->qp_num, ack, {});
	fake.send(dev_port, 0xe9, qp->qp_num, h, i32({1, 2}));
	auto acked = [&](uint32_t mid) {
		ASSERT_TRUE(fake.recv(&p, dev_port));
		EXPECT_EQ(p.opcode, 0xe9);
		EXPECT_EQ(p.h.flags, 0x08) << "an acknowledgement";
		EXPECT_EQ(p.h.mid, mid);
		EXPECT_EQ(p.h.phase, 1);
		EXPECT_TRUE(p.payload.empty());
	};
	acked(1);
	completes(1, 11, 22);
	// Sent again after it completed (our acknowledgement was lost): the
	// device acknowledges it again.
	fake.send(dev_port, 0xe9, qp->qp_num, h, i32({1, 2}));
	acked(1);
	EXPECT_EQ(counters().coll_stale - c1.coll_stale, 1u);

	// Message 2's partial before message 2 is posted: kept (acknowledged),
	// then used.  The message completes on its result, without waiting
	// for our partial's acknowledgement (ibv_coll_wire(7): it rides on
	// the peer's next partial or comes alone), which is taken when it
	// comes.  (This said "completes when ours is acknowledged" and
	// passed only when post()'s one poll took the completion: under
	// AddressSanitizer it came later, and the check failed 1 run in 10.)
	Ceth h2 = h;
	h2.mid = 2;
	fake.send(dev_port, 0xe9, qp->qp_num, h2, i32({100, 200}));
	acked(2);
	EXPECT_EQ(counters().coll_early - c1.coll_early, 1u);
	post(2);
	ASSERT_TRUE(fake.recv(&p, dev_port));
	EXPECT_EQ(p.h.mid, 2u);
	EXPECT_EQ(p.payload, i32({10, 20}));
	completes(2, 110, 220);
	const ibv_coll_counters c2 = counters();
	Ceth ack2 = ack;
	ack2.mid = 2;
	fake.send(dev_port, 0xe9, qp->qp_num, ack2, {});
	usleep(20000);
	ibv_poll_coll_cq(cq, 1, &wc); // lend the thread: the acknowledgement is taken
	const ibv_coll_counters c3 = counters();
	EXPECT_EQ(c3.coll_malformed, c2.coll_malformed);
	EXPECT_EQ(c3.coll_bad_node, c2.coll_bad_node);

	ibv_destroy_coll_qp(qp);
	ibv_dereg_coll_mr(mr);
	ibv_destroy_coll_cq(cq);
	ibv_dealloc_coll_pd(pd);
	ibv_close_coll_device(ctx);
}
