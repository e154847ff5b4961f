// DMA into another process's address space (the shared device's first
// step), and work queues shared with another process through a memfd (the
// rings of its second): a protection domain whose memory is a forked
// child's.  The device's copies go through process_vm_readv/writev with
// the same key, PD and bounds checks; RC (write, read, send both ways) and
// collectives (ring allreduce and allgather, the child's ranks on one NIC
// and local ones on the other) are checked byte for byte against what the
// child holds, read back over a socket, and against a scalar reference.
#include "coll/coll_job.h"
#include "nic/mr_table.h"
#include "nic/nic.h"
#include "nic/queue.h"
#include "nic/wqe.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

using namespace ibv_coll::emu;

namespace {

constexpr size_t kLen = 1 << 16;

uint8_t pattern(size_t i)
{
	return uint8_t(i * 7 + 3);
}

bool read_full(int fd, void *p, size_t n)
{
	auto *b = static_cast<uint8_t *>(p);
	while (n) {
		ssize_t k = read(fd, b, n);
		if (k <= 0)
			return false;
		b += k;
		n -= size_t(k);
	}
	return true;
}

bool write_full(int fd, const void *p, size_t n)
{
	auto *b = static_cast<const uint8_t *>(p);
	while (n) {
		ssize_t k = write(fd, b, n);
		if (k <= 0)
			return false;
		b += k;
		n -= size_t(k);
	}
	return true;
}

// A child with kLen bytes of private memory holding pattern(); it tells
// its address, sends the bytes back on 'd' and exits on 'q' (or EOF).
struct Child {
	pid_t pid = -1;
	int fd = -1;
	uint64_t addr = 0;

	Child()
	{
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			return;
		pid = fork();
		if (pid == 0) {
			close(sv[0]);
			void *m = mmap(nullptr, kLen, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m == MAP_FAILED)
				_exit(2);
			auto *b = static_cast<uint8_t *>(m);
			for (size_t i = 0; i < kLen; i++)
				b[i] = pattern(i);
			uint64_t a = reinterpret_cast<uint64_t>(m);
			if (!write_full(sv[1], &a, sizeof(a)))
				_exit(3);
			char c;
			while (read(sv[1], &c, 1) == 1 && c == 'd')
				if (!write_full(sv[1], b, kLen))
					_exit(4);
			_exit(0);
		}
		close(sv[1]);
		fd = sv[0];
		if (!read_full(fd, &addr, sizeof(addr)))
			addr = 0;
	}
	std::vector<uint8_t> dump()
	{
		std::vector<uint8_t> v(kLen);
		char c = 'd';
		if (!write_full(fd, &c, 1) || !read_full(fd, v.data(), kLen))
			v.clear();
		return v;
	}
	void quit()
	{
		if (pid > 0) {
			char c = 'q';
			(void)write_full(fd, &c, 1);
			int st;
			waitpid(pid, &st, 0);
			pid = -1;
		}
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	~Child() { quit(); }
};

TEST(DmaSpace, ReadsAndWritesAnotherProcess)
{
	Child ch;
	ASSERT_GT(ch.pid, 0);
	ASSERT_NE(ch.addr, 0u);
	std::vector<uint8_t> got(5000);
	ASSERT_TRUE(dma_read(ch.pid, got.data(), ch.addr + 100, got.size()));
	for (size_t i = 0; i < got.size(); i++)
		ASSERT_EQ(got[i], pattern(100 + i)) << i;
	const char msg[] = "written by the device";
	ASSERT_TRUE(dma_write(ch.pid, ch.addr + 9000, msg, sizeof(msg)));

	// An SGE list in the child's memory: gather and scatter across entries.
	Sge s[2] = {{ch.addr + 20000, 10, 0}, {ch.addr + 30000, 7, 0}};
	SgeCursor g{s, 2, ch.pid};
	g.seek(5);
	uint8_t flat[12];
	ASSERT_TRUE(g.gather(flat, 12));
	EXPECT_EQ(flat[0], pattern(20005));
	EXPECT_EQ(flat[4], pattern(20009));
	EXPECT_EQ(flat[5], pattern(30000));
	EXPECT_EQ(flat[11], pattern(30006));
	uint8_t ones[17];
	memset(ones, 0xa5, sizeof(ones));
	SgeCursor sc{s, 2, ch.pid};
	ASSERT_TRUE(sc.scatter(ones, 17));

	std::vector<uint8_t> v = ch.dump();
	ASSERT_EQ(v.size(), kLen);
	EXPECT_EQ(memcmp(v.data() + 9000, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < 10; i++)
		EXPECT_EQ(v[20000 + i], 0xa5);
	EXPECT_EQ(v[20010], pattern(20010));
	for (size_t i = 0; i < 7; i++)
		EXPECT_EQ(v[30000 + i], 0xa5);
	EXPECT_EQ(v[30007], pattern(30007));

	// Memory the child has not mapped: an error, not a crash.
	uint8_t x;
	errno = 0;
	EXPECT_FALSE(dma_read(ch.pid, &x, 0x1000, 1)); // below mmap_min_addr
	EXPECT_NE(errno, 0);
	// A process that is gone.
	pid_t gone = ch.pid;
	ch.quit();
	EXPECT_FALSE(dma_read(gone, &x, 0x1000, 1));
	EXPECT_EQ(errno, ESRCH);
	EXPECT_FALSE(dma_write(gone, 0x1000, &x, 1));
}

constexpr uint32_t kAll = kAccLocalWrite | kAccRemoteWrite | kAccRemoteRead;

Endpoint loopback(uint16_t port)
{
	Endpoint e;
	e.ip = IpAddr::from_v4(htonl(0x7f000001));
	e.port = port;
	return e;
}

// One NIC on 127.0.0.1 with a CQ; its PD in `space`.
struct Dev {
	Queue cq_ring{256, sizeof(Cqe)};
	std::unique_ptr<Nic> nic;
	Cq *cq = nullptr;
	uint32_t pd = 0;

	explicit Dev(DmaSpace space)
	{
		NicParams p;
		p.name = space == kLocalSpace ? "local" : "child";
		p.gids.push_back(loopback(0).ip);
		p.udp_port = 0;
		p.cfg.seg_units = 64;
		EXPECT_EQ(Nic::create(p, &nic), 0);
		EXPECT_EQ(nic->alloc_pd_in(space, &pd), 0);
		EXPECT_EQ(nic->pd_space(pd), space);
		uint32_t cqn;
		EXPECT_EQ(nic->create_cq(&cq_ring, nullptr, nullptr, &cq, &cqn), 0);
	}
	Endpoint ep() const { return loopback(nic->udp_port()); }
	// The next completion, within 10 s.
	bool poll(Cqe *out)
	{
		auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
		while (std::chrono::steady_clock::now() < until) {
			nic->progress(cq);
			uint32_t c = cq_ring.cons();
			if (cq_ring.prod() != c) {
				memcpy(out, cq_ring.slot(c), sizeof(*out));
				cq_ring.consume(c + 1);
				return true;
			}
			std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
		return false;
	}
};

struct RcQp {
	Queue sq{16, send_wqe_stride(2)}, rq{16, recv_wqe_stride(2)};
	Qp *qp = nullptr;
	uint32_t qpn = 0;
	Dev &dev;
	// The QP goes before its rings: the engine thread may still flush it.
	~RcQp()
	{
		if (qp)
			dev.nic->destroy_qp(qp);
	}
	RcQp(Dev &d) : dev(d)
	{
		QpCreate c;
		c.pdn = d.pd;
		c.sq = &sq;
		c.rq = &rq;
		c.send_cq = c.recv_cq = d.cq;
		EXPECT_EQ(d.nic->create_qp(c, &qp, &qpn), 0);
	}
	void connect(Dev &d, const Endpoint &to, uint32_t dqpn)
	{
		QpAttr a;
		a.state = QpState::init;
		a.access = kAll;
		ASSERT_EQ(d.nic->modify_qp(qp, a, kQpState | kQpAccess | kQpPort), 0);
		a.state = QpState::rtr;
		a.path_mtu = 1024;
		a.remote = to;
		a.dest_qpn = dqpn;
		ASSERT_EQ(d.nic->modify_qp(qp, a,
					   kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn),
			  0);
		a.state = QpState::rts;
		a.timeout = 14;
		ASSERT_EQ(d.nic->modify_qp(qp, a, kQpState | kQpSqPsn | kQpTimeout), 0);
	}
	void post_send(Dev &d, uint64_t id, WrOpcode op, Sge s, uint64_t raddr = 0,
		       uint32_t rkey = 0)
	{
		auto *w = sq.at<SendWqe>(sq.prod_relaxed());
		memset(w, 0, sq.stride());
		w->wr_id = id;
		w->opcode = uint8_t(op);
		w->flags = kWqeSignaled;
		w->num_sge = 1;
		w->remote_addr = raddr;
		w->rkey = rkey;
		w->length = s.length;
		w->sges()[0] = s;
		sq.publish(sq.prod_relaxed() + 1);
		d.nic->sq_doorbell(qp);
	}
	void post_recv(Dev &d, uint64_t id, Sge s)
	{
		auto *w = rq.at<RecvWqe>(rq.prod_relaxed());
		memset(w, 0, rq.stride());
		w->wr_id = id;
		w->num_sge = 1;
		w->length = s.length;
		w->sges()[0] = s;
		rq.publish(rq.prod_relaxed() + 1);
		d.nic->rq_doorbell(qp);
	}
};

TEST(DmaSpace, RcIntoAndOutOfAnotherProcess)
{
	Child ch;
	ASSERT_GT(ch.pid, 0);
	Dev a(ch.pid), b(kLocalSpace);
	std::vector<uint8_t> mem(kLen);
	for (size_t i = 0; i < kLen; i++)
		mem[i] = uint8_t(i * 13 + 1);
	const uint64_t lb = reinterpret_cast<uint64_t>(mem.data());
	uint32_t akey, bkey, aro;
	ASSERT_EQ(a.nic->reg_mr(a.pd, reinterpret_cast<void *>(ch.addr), 32768, kAll, &akey), 0);
	// A read-only window further up the child's memory.
	ASSERT_EQ(a.nic->reg_mr(a.pd, reinterpret_cast<void *>(ch.addr + 40000), 4096,
				kAccRemoteRead, &aro),
		  0);
	ASSERT_EQ(b.nic->reg_mr(b.pd, mem.data(), kLen, kAll, &bkey), 0);
	RcQp qa(a), qb(b);
	qa.connect(a, b.ep(), qb.qpn);
	qb.connect(b, a.ep(), qa.qpn);

	Cqe c;
	// b writes 5000 bytes (five packets) into the child at +1000.
	qb.post_send(b, 1, WrOpcode::rdma_write, Sge{lb, 5000, bkey}, ch.addr + 1000, akey);
	ASSERT_TRUE(b.poll(&c));
	EXPECT_EQ(c.wr_id, 1u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	// b reads 3000 bytes of the child's read-only window.
	qb.post_send(b, 2, WrOpcode::rdma_read, Sge{lb + 20000, 3000, bkey}, ch.addr + 40100, aro);
	ASSERT_TRUE(b.poll(&c));
	EXPECT_EQ(c.wr_id, 2u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	for (size_t i = 0; i < 3000; i++)
		ASSERT_EQ(mem[20000 + i], pattern(40100 + i)) << i;
	// A send from b lands in a receive buffer in the child...
	qa.post_recv(a, 10, Sge{ch.addr + 12000, 4096, akey});
	qb.post_send(b, 3, WrOpcode::send, Sge{lb + 100, 2500, bkey});
	ASSERT_TRUE(b.poll(&c));
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	ASSERT_TRUE(a.poll(&c));
	EXPECT_EQ(c.wr_id, 10u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	EXPECT_EQ(c.byte_len, 2500u);
	// ...and one from the child's memory in b's.
	qb.post_recv(b, 20, Sge{lb + 30000, 4096, bkey});
	qa.post_send(a, 4, WrOpcode::send, Sge{ch.addr + 24000, 3333, akey});
	ASSERT_TRUE(a.poll(&c));
	EXPECT_EQ(c.wr_id, 4u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	ASSERT_TRUE(b.poll(&c));
	EXPECT_EQ(c.wr_id, 20u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::success));
	for (size_t i = 0; i < 3333; i++)
		ASSERT_EQ(mem[30000 + i], pattern(24000 + i)) << i;

	std::vector<uint8_t> v = ch.dump();
	ASSERT_EQ(v.size(), kLen);
	for (size_t i = 0; i < 5000; i++)
		ASSERT_EQ(v[1000 + i], uint8_t(i * 13 + 1)) << i;
	EXPECT_EQ(v[999], pattern(999));
	EXPECT_EQ(v[6000], pattern(6000));
	for (size_t i = 0; i < 2500; i++)
		ASSERT_EQ(v[12000 + i], uint8_t((100 + i) * 13 + 1)) << i;
	EXPECT_EQ(v[14500], pattern(14500));

	// The same checks as in one process: a write into the read-only window
	// is refused, and nothing of it reaches the child.
	qb.post_send(b, 5, WrOpcode::rdma_write, Sge{lb, 64, bkey}, ch.addr + 40000, aro);
	ASSERT_TRUE(b.poll(&c));
	EXPECT_EQ(c.wr_id, 5u);
	EXPECT_EQ(c.status, uint8_t(WcStatus::rem_access_err));
	v = ch.dump();
	ASSERT_EQ(v.size(), kLen);
	for (size_t i = 0; i < 64; i++)
		ASSERT_EQ(v[40000 + i], pattern(40000 + i)) << i;
}

// A two-node ring job: node 0 on a NIC whose PD is the child's (ranks_a
// ranks, buffers in the child), node 1 on a local one (one rank).
void ring_job(CollOp op, uint16_t ranks_a)
{
	Child ch;
	ASSERT_GT(ch.pid, 0);
	Dev a(ch.pid), b(kLocalSpace);
	const uint64_t count = 3000; // int32: 12000 bytes, 12 blocks of 1 KiB
	const uint32_t total = ranks_a + 1u;
	const bool gather = op == CollOp::allgather;
	const uint64_t out_elems = gather ? count * total : count;
	uint32_t akey, bkey;
	ASSERT_EQ(a.nic->reg_mr(a.pd, reinterpret_cast<void *>(ch.addr), kLen, kAll, &akey), 0);
	std::vector<int32_t> bsrc(count), bdst(out_elems, -1);
	for (uint64_t i = 0; i < count; i++)
		bsrc[i] = int32_t(i * 31 - 7);
	uint32_t k1, k2;
	ASSERT_EQ(b.nic->reg_mr(b.pd, bsrc.data(), count * 4, kAll, &k1), 0);
	ASSERT_EQ(b.nic->reg_mr(b.pd, bdst.data(), out_elems * 4, kAll, &k2), 0);
	(void)bkey;

	// The child's ranks: sources at r * 12000 (its pattern), destinations
	// from 32768 on.
	auto child_src = [&](uint16_t r) { return ch.addr + r * count * 4; };
	auto child_dst = [&](uint16_t r) { return ch.addr + 32768 + r * out_elems * 4; };
	ASSERT_LE(ranks_a * count * 4, 32768u);
	ASSERT_LE(ranks_a * out_elems * 4, kLen - 32768u);
	std::vector<uint8_t> before = ch.dump();
	ASSERT_EQ(before.size(), kLen);

	Queue asq{4, coll_wqe_stride(ranks_a)}, bsq{4, coll_wqe_stride(1)}, none{1, 64};
	Qp *qa, *qb;
	uint32_t na, nb;
	QpCreate c;
	c.coll = true;
	c.pdn = a.pd;
	c.sq = &asq;
	c.rq = &none;
	c.send_cq = c.recv_cq = a.cq;
	ASSERT_EQ(a.nic->create_qp(c, &qa, &na), 0);
	c.pdn = b.pd;
	c.sq = &bsq;
	c.send_cq = c.recv_cq = b.cq;
	ASSERT_EQ(b.nic->create_qp(c, &qb, &nb), 0);

	JobConfig j;
	j.jid = 5;
	j.key = 0x1234;
	j.seg_base = 0;
	j.seg_count = 8;
	j.topology = Topology::ring;
	j.total_ranks = total;
	j.members.resize(2);
	j.members.mut()[0] = JobMember{a.ep(), na, ranks_a, 0};
	j.members.mut()[1] = JobMember{b.ep(), nb, 1, ranks_a};
	auto start = [&](Dev &d, Qp *qp, uint16_t node) {
		QpAttr at;
		at.state = QpState::init;
		ASSERT_EQ(d.nic->modify_qp(qp, at, kQpState | kQpPort), 0);
		JobConfig jj = j;
		jj.node = node;
		at.state = QpState::rtr;
		at.path_mtu = 1024;
		at.job = &jj;
		ASSERT_EQ(d.nic->modify_qp(qp, at, kQpState | kQpPathMtu | kQpJob), 0);
		at.state = QpState::rts;
		ASSERT_EQ(d.nic->modify_qp(qp, at, kQpState), 0);
	};
	start(a, qa, 0);
	start(b, qb, 1);

	auto post = [&](Dev &d, Qp *qp, Queue &sq, const std::vector<Sge> &src,
			const std::vector<Sge> &dst) {
		auto *w = sq.at<CollWqe>(sq.prod_relaxed());
		memset(w, 0, sq.stride());
		w->wr_id = 77;
		w->opcode = uint8_t(op);
		w->flags = kWqeSignaled;
		w->num_sge = uint16_t(src.size());
		w->op = uint8_t(RedOp::sum);
		w->dtype = uint8_t(Dtype::int32);
		w->mid = 1;
		w->count = count;
		for (size_t r = 0; r < src.size(); r++) {
			w->srcs()[r] = src[r];
			w->dsts()[r] = dst[r];
		}
		sq.publish(sq.prod_relaxed() + 1);
		d.nic->sq_doorbell(qp);
	};
	std::vector<Sge> asrc, adst;
	for (uint16_t r = 0; r < ranks_a; r++) {
		asrc.push_back(Sge{child_src(r), uint32_t(count * 4), akey});
		adst.push_back(Sge{child_dst(r), uint32_t(out_elems * 4), akey});
	}
	post(a, qa, asq, asrc, adst);
	post(b, qb, bsq, {Sge{uint64_t(uintptr_t(bsrc.data())), uint32_t(count * 4), k1}},
	     {Sge{uint64_t(uintptr_t(bdst.data())), uint32_t(out_elems * 4), k2}});
	Cqe ca, cb;
	ASSERT_TRUE(a.poll(&ca));
	ASSERT_TRUE(b.poll(&cb));
	EXPECT_EQ(ca.coll_status, uint8_t(CollStatus::success));
	EXPECT_EQ(cb.coll_status, uint8_t(CollStatus::success));

	// The reference: the child's sources are its pattern, as it held
	// them before the job.
	std::vector<int32_t> ref(out_elems);
	auto child_elem = [&](uint16_t r, uint64_t i) {
		int32_t x;
		memcpy(&x, before.data() + r * count * 4 + i * 4, 4);
		return x;
	};
	for (uint64_t i = 0; i < count; i++) {
		if (gather) {
			for (uint16_t r = 0; r < ranks_a; r++)
				ref[r * count + i] = child_elem(r, i);
			ref[ranks_a * count + i] = bsrc[i];
		} else {
			int64_t s = bsrc[i];
			for (uint16_t r = 0; r < ranks_a; r++)
				s += child_elem(r, i);
			ref[i] = int32_t(uint32_t(s));
		}
	}
	for (uint64_t i = 0; i < out_elems; i++)
		ASSERT_EQ(bdst[i], ref[i]) << "local node, element " << i;
	std::vector<uint8_t> v = ch.dump();
	ASSERT_EQ(v.size(), kLen);
	for (uint16_t r = 0; r < ranks_a; r++) {
		for (uint64_t i = 0; i < out_elems; i++) {
			int32_t x;
			memcpy(&x, v.data() + (child_dst(r) - ch.addr) + i * 4, 4);
			ASSERT_EQ(x, ref[i]) << "child's rank " << r << ", element " << i;
		}
	}
	// Its sources untouched.
	EXPECT_EQ(memcmp(v.data(), before.data(), ranks_a * count * 4), 0);
	EXPECT_EQ(b.nic->destroy_qp(qb), 0);
	EXPECT_EQ(a.nic->destroy_qp(qa), 0);
}

TEST(DmaSpace, RingAllreduceWithAnotherProcess)
{
	ring_job(CollOp::allreduce, 1);
}

// Two ranks in the child: the NIC reduces them from bounce copies.
TEST(DmaSpace, RingAllreduceTwoRanksInAnotherProcess)
{
	ring_job(CollOp::allreduce, 2);
}

TEST(DmaSpace, RingAllgatherWithAnotherProcess)
{
	ring_job(CollOp::allgather, 1);
}

// A work queue in a memfd, produced into by a child that maps it at an
// address of its own and consumed here: 8 slots for 20000 entries, so the
// indices wrap and the producer waits for room.
TEST(SharedQueue, ProducerInAnotherProcess)
{
	constexpr uint32_t kSlots = 8, kStride = 100, kN = 20000;
	const size_t bytes = Queue::region_bytes(kSlots, kStride);
	EXPECT_EQ(bytes, 128u + 8 * 128);
	int fd = memfd_create("test-queue", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(ftruncate(fd, off_t(bytes)), 0);
	void *mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_NE(mem, MAP_FAILED);
	Queue q(kSlots, kStride, mem, true);
	EXPECT_EQ(q.slots(), kSlots);
	EXPECT_EQ(q.stride(), 128u);
	EXPECT_EQ(q.free_slots(), kSlots);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || m == mem)
			_exit(2);
		munmap(mem, bytes); // nothing of the parent's mapping is used
		Queue p(kSlots, kStride, m, false);
		for (uint32_t i = 0; i < kN; i++) {
			while (!p.free_slots())
				std::this_thread::yield();
			uint32_t idx = p.prod_relaxed();
			uint64_t v[2] = {i, uint64_t(i) * 3 + 1};
			memcpy(p.slot(idx), v, sizeof(v));
			p.publish(idx + 1);
		}
		_exit(0);
	}
	uint32_t got = 0;
	bool in_order = true;
	auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (got < kN && std::chrono::steady_clock::now() < until) {
		uint32_t c = q.cons();
		if (q.prod() == c) {
			std::this_thread::yield();
			continue;
		}
		uint64_t v[2];
		memcpy(v, q.slot(c), sizeof(v));
		in_order = in_order && v[0] == got && v[1] == uint64_t(got) * 3 + 1;
		q.consume(c + 1);
		got++;
	}
	int st = 0;
	waitpid(pid, &st, 0);
	EXPECT_EQ(got, kN);
	EXPECT_TRUE(in_order);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
	EXPECT_EQ(q.prod(), kN);
	munmap(mem, bytes);
	close(fd);
}

} // namespace
