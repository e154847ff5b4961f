// A node whose ranks come from several collective QPs of one device
// (IBV_COLL_JOB_ATTR_LOCAL, as on the host's shared device), in one
// process: node 0's lead QP serves local ranks 1..2 and a QP in another
// protection domain joins it with local rank 0; node 1 is another device
// with one QP of 2 ranks.  Every collective is checked element by element
// against the scalar reference (tests/common/coll_ref), then the checks on
// joining, a QP that posts something else, a QP that never posts, and
// another PD's key.
#include "coll_qp.h"

#include <ibv_coll/ibv_coll.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <cstring>
#include <memory>
#include <vector>

using namespace ibvc_test;

namespace {

struct Fixture {
	ibv_coll_context *ctx[2] = {};
	ibv_coll_member m[2]{};
	std::unique_ptr<JQp> lead, part, other;
	uint32_t timeout_ms = 0;
	bool open()
	{
		for (int d = 0; d < 2; d++) {
			if (!(ctx[d] = open_test_device()))
				return false;
			ibv_coll_port_attr pa;
			ibv_query_coll_port(ctx[d], 1, &pa);
			ibv_query_coll_gid(ctx[d], 1, 0, &m[d].gid);
			m[d].udp_port = pa.udp_port;
		}
		lead = std::make_unique<JQp>(ctx[0], 1, 2, true);
		part = std::make_unique<JQp>(ctx[0], 0, 1, true);
		other = std::make_unique<JQp>(ctx[1], 0, 2, false);
		m[0].num_ranks = 3;
		m[0].qp_num = lead->qp->qp_num;
		m[1].num_ranks = 2;
		m[1].qp_num = other->qp->qp_num;
		return true;
	}
	~Fixture()
	{
		lead.reset();
		part.reset();
		other.reset();
		for (ibv_coll_context *c : ctx)
			if (c)
				ibv_close_coll_device(c);
	}
	ibv_coll_job_attr job(uint16_t node) const
	{
		ibv_coll_job_attr j{};
		j.jid = 41;
		j.node_index = node;
		j.num_nodes = 2;
		j.members = m;
		j.seg_count = 32;
		j.job_key = 0x5eed;
		j.timeout_ms = timeout_ms;
		return j;
	}
	// The joined QP first: it may join before its lead has the job.
	void up()
	{
		for (JQp *q : {part.get(), lead.get(), other.get()})
			ASSERT_EQ(q->modify(IBV_QPS_INIT), 0);
		ASSERT_EQ(part->rtr(job(0)), 0);
		ASSERT_EQ(lead->rtr(job(0)), 0);
		ASSERT_EQ(other->rtr(job(1)), 0);
		for (JQp *q : {part.get(), lead.get(), other.get()})
			ASSERT_EQ(q->modify(IBV_QPS_RTS), 0);
	}
};

CollSpec spec_of(int coll, int op, int dtype, uint64_t count, uint32_t root = 0)
{
	return ibvc_test::spec_of(coll, op, dtype, count, root, {3, 2});
}

// Runs s on the fixture; every rank's destination against the reference.
void run_and_check(Fixture &f, const CollSpec &s, uint64_t seed)
{
	const uint32_t firsts[3] = {1, 0, 3}; // lead, part, other: first global rank
	JQp *qps[3] = {f.lead.get(), f.part.get(), f.other.get()};
	RankBufs bufs[3];
	for (int i = 0; i < 3; i++)
		ASSERT_TRUE(bufs[i].make(*qps[i], s, seed, firsts[i]));
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(bufs[i].post(*qps[i], 100 + i), 0) << i;
	for (int i = 0; i < 3; i++) {
		ibv_coll_wc wc{};
		ASSERT_TRUE(qps[i]->wait(&wc)) << "QP " << i << " never completed";
		EXPECT_EQ(wc.status, IBV_WC_SUCCESS)
			<< i << ": " << ibv_coll_wc_status_str(wc.status);
		EXPECT_EQ(wc.wr_id, uint64_t(100 + i));
	}
	for (int i = 0; i < 3; i++)
		EXPECT_EQ(bufs[i].check(seed), "");
	for (JQp *q : qps) {
		for (ibv_coll_mr *m : q->mrs)
			ibv_dereg_coll_mr(m);
		q->mrs.clear();
	}
}

} // namespace

TEST(CollJoin, EveryCollectiveAcrossJoinedQpsIsExact)
{
	Fixture f;
	ASSERT_TRUE(f.open());
	f.up();
	if (HasFatalFailure())
		return;
	uint64_t seed = 1;
	// Roots on the joined QP (global 0), the lead (2) and the other node (4).
	for (const CollSpec &s : {
		     spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32, 3000),
		     spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_MAX, IBV_COLL_DTYPE_INT16, 1001),
		     spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_AVG, IBV_COLL_DTYPE_FLOAT64, 700),
		     spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_BXOR, IBV_COLL_DTYPE_UINT8, 5000),
		     spec_of(IBV_COLL_WR_ALLREDUCE, IBV_COLL_OP_PROD, IBV_COLL_DTYPE_BFLOAT16, 257),
		     spec_of(IBV_COLL_WR_REDUCE, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_INT64, 999, 0),
		     spec_of(IBV_COLL_WR_REDUCE, IBV_COLL_OP_MIN, IBV_COLL_DTYPE_FLOAT16, 640, 4),
		     spec_of(IBV_COLL_WR_BCAST, 0, IBV_COLL_DTYPE_INT32, 1500, 0),
		     spec_of(IBV_COLL_WR_BCAST, 0, IBV_COLL_DTYPE_UINT32, 77, 2),
		     spec_of(IBV_COLL_WR_ALLGATHER, 0, IBV_COLL_DTYPE_INT32, 300),
		     spec_of(IBV_COLL_WR_REDUCE_SCATTER, IBV_COLL_OP_SUM, IBV_COLL_DTYPE_FLOAT32,
			     333),
		     spec_of(IBV_COLL_WR_BARRIER, 0, IBV_COLL_DTYPE_UINT8, 0),
	     }) {
		run_and_check(f, s, seed++);
		if (HasFatalFailure())
			return;
	}
}

TEST(CollJoin, JoiningIsChecked)
{
	Fixture f;
	ASSERT_TRUE(f.open());
	for (JQp *q : {f.part.get(), f.lead.get(), f.other.get()})
		ASSERT_EQ(q->modify(IBV_QPS_INIT), 0);
	ASSERT_EQ(f.lead->rtr(f.job(0)), 0);
	ibv_coll_job_attr j = f.job(0);
	j.job_key++;
	EXPECT_EQ(f.part->rtr(j), EPERM) << "another job key";
	f.part->first = 1; // the lead's
	EXPECT_EQ(f.part->rtr(f.job(0)), EBUSY) << "a rank the lead serves";
	f.part->first = 2;
	f.part->count = 2;
	EXPECT_EQ(f.part->rtr(f.job(0)), EINVAL) << "past the node's ranks";
	f.part->first = 0;
	f.part->count = 0;
	EXPECT_EQ(f.part->rtr(f.job(0)), EINVAL) << "no ranks";
	f.part->count = 1;
	f.part->local = false;
	EXPECT_EQ(f.part->rtr(f.job(0)), EINVAL) << "all the ranks, naming another QP";
	f.part->local = true;
	j = f.job(0);
	j.jid++;
	EXPECT_EQ(f.part->rtr(j), EINVAL) << "another job";
	EXPECT_EQ(f.part->rtr(f.job(0)), 0);
	// A QP joining a QP that joined.
	JQp third(f.ctx[0], 0, 1, true);
	ASSERT_EQ(third.modify(IBV_QPS_INIT), 0);
	ibv_coll_member m2[2] = {f.m[0], f.m[1]};
	m2[0].qp_num = f.part->qp->qp_num;
	j = f.job(0);
	j.members = m2;
	EXPECT_EQ(third.rtr(j), EINVAL);
}

// Posts an allreduce of count elements (int32, sum) on q for its ranks.
int post_allreduce(JQp &q, std::vector<int32_t> *buf, uint64_t count, uint32_t lkey_from = 0)
{
	buf->assign(count * q.count, 1);
	ibv_coll_mr *mr = ibv_reg_coll_mr(q.pd, buf->data(), buf->size() * 4,
					  IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return errno;
	q.mrs.push_back(mr);
	ibv_sge s[4];
	for (uint32_t r = 0; r < q.count; r++)
		s[r] = {reinterpret_cast<uint64_t>(buf->data() + r * count), uint32_t(count * 4),
			lkey_from ? lkey_from : mr->lkey};
	ibv_coll_send_wr w{}, *bad;
	w.opcode = IBV_COLL_WR_ALLREDUCE;
	w.send_flags = IBV_COLL_SEND_SIGNALED;
	w.sg_list = s;
	w.num_sge = int(q.count);
	w.wr.coll.dst_list = s;
	w.wr.coll.count = count;
	w.wr.coll.op = IBV_COLL_OP_SUM;
	w.wr.coll.dtype = IBV_COLL_DTYPE_INT32;
	return ibv_post_coll_send(q.qp, &w, &bad);
}

// ibv_modify_coll_qp(3): a collective the node's QPs posted differently
// fails with LOCAL_ERR there, the QP that posted the other one included
// (it used to get FLUSHED), and with REMOTE_ABORT on the other node, which
// the first node's ABORT tells.
TEST(CollJoin, DifferentCollectivesFailOnEveryQp)
{
	Fixture f;
	ASSERT_TRUE(f.open());
	f.up();
	std::vector<int32_t> a, b, c;
	ASSERT_EQ(post_allreduce(*f.lead, &a, 100), 0);
	ASSERT_EQ(post_allreduce(*f.part, &b, 101), 0);
	ASSERT_EQ(post_allreduce(*f.other, &c, 100), 0);
	for (JQp *q : {f.lead.get(), f.part.get(), f.other.get()}) {
		ibv_coll_wc wc{};
		ASSERT_TRUE(q->wait(&wc));
		const bool node0 = q != f.other.get();
		EXPECT_EQ(wc.status, node0 ? IBV_WC_LOC_PROT_ERR : IBV_WC_REM_ABORT_ERR)
			<< (q == f.part.get() ? "part: " : "") << ibv_coll_wc_status_str(wc.status);
		EXPECT_EQ(wc.coll_status,
			  node0 ? IBV_COLL_STATUS_LOCAL_ERR : IBV_COLL_STATUS_REMOTE_ABORT);
		EXPECT_EQ(wc.opcode, IBV_COLL_WC_ALLREDUCE);
	}
}

TEST(CollJoin, AQpThatNeverPostsFailsTheCollectiveWithinTheTimeout)
{
	Fixture f;
	f.timeout_ms = 300;
	ASSERT_TRUE(f.open());
	f.up();
	std::vector<int32_t> a, c;
	auto t0 = std::chrono::steady_clock::now();
	ASSERT_EQ(post_allreduce(*f.lead, &a, 64), 0);
	ASSERT_EQ(post_allreduce(*f.other, &c, 64), 0);
	ibv_coll_wc wc{};
	ASSERT_TRUE(f.lead->wait(&wc, 5000));
	EXPECT_EQ(wc.status, IBV_WC_RESP_TIMEOUT_ERR);
	EXPECT_EQ(wc.coll_status, IBV_COLL_STATUS_TIMEOUT);
	ASSERT_TRUE(f.other->wait(&wc, 5000));
	EXPECT_NE(wc.status, IBV_WC_SUCCESS);
	EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(CollJoin, AJoinedQpDestroyedMidCollectiveFailsItEverywhere)
{
	Fixture f;
	f.timeout_ms = 5000;
	ASSERT_TRUE(f.open());
	f.up();
	// Node 1 never posts: the message starts on node 0 and stays there.
	std::vector<int32_t> a, b;
	ASSERT_EQ(post_allreduce(*f.lead, &a, 50000), 0);
	ASSERT_EQ(post_allreduce(*f.part, &b, 50000), 0);
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	for (ibv_coll_mr *m : f.part->mrs)
		ibv_dereg_coll_mr(m);
	f.part->mrs.clear();
	f.part.reset(); // its QP, CQ and PD go
	ibv_coll_wc wc{};
	auto t0 = std::chrono::steady_clock::now();
	ASSERT_TRUE(f.lead->wait(&wc, 3000));
	EXPECT_EQ(wc.coll_status, IBV_COLL_STATUS_REMOTE_ABORT);
	EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(CollJoin, AnotherPdsKeyIsRefused)
{
	Fixture f;
	ASSERT_TRUE(f.open());
	f.up();
	std::vector<int32_t> a, b;
	ASSERT_EQ(post_allreduce(*f.lead, &a, 16), 0);
	// The joined QP names the lead's MR: not its protection domain.
	EXPECT_NE(post_allreduce(*f.part, &b, 16, f.lead->mrs[0]->lkey), 0);
}

// The lead destroyed mid-collective fails it on the QP that joined; a
// lead that leaves between collectives leaves the next one failing there.
TEST(CollJoin, TheLeadLeavingFailsWhatItsJoinedQpPosts)
{
	for (bool mid_collective : {true, false}) {
		Fixture f;
		ASSERT_TRUE(f.open());
		f.up();
		std::vector<int32_t> a, b;
		if (mid_collective) {
			ASSERT_EQ(post_allreduce(*f.lead, &a, 50000), 0);
			ASSERT_EQ(post_allreduce(*f.part, &b, 50000), 0);
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
		}
		for (ibv_coll_mr *m : f.lead->mrs)
			ibv_dereg_coll_mr(m);
		f.lead->mrs.clear();
		f.lead.reset();
		if (!mid_collective) {
			ASSERT_EQ(post_allreduce(*f.part, &b, 64), 0);
		}
		ibv_coll_wc wc{};
		ASSERT_TRUE(f.part->wait(&wc, 3000)) << mid_collective;
		EXPECT_NE(wc.status, IBV_WC_SUCCESS) << mid_collective;
	}
}
