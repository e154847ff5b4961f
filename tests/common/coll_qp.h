// Collective QPs that serve part of their node's ranks
// (IBV_COLL_JOB_ATTR_LOCAL), for the tests of a node's ranks across QPs and
// processes: a QP with its own PD and CQ, and a collective of a CollSpec
// posted for some of the job's ranks and checked against the scalar
// reference (coll_ref.h).
#pragma once

#include "coll_ref.h"
#include "rc_endpoint.h"

#include <ibv_coll/ibv_coll.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

namespace ibvc_test {

template <class E> void set_raw(E &field, int v)
{
	static_assert(sizeof(E) == sizeof(int));
	memcpy(&field, &v, sizeof(v));
}


// One collective QP with its own PD and CQ, serving local ranks
// [first, first + count) of its node.
struct JQp {
	ibv_coll_pd *pd = nullptr;
	ibv_coll_cq *cq = nullptr;
	ibv_coll_qp *qp = nullptr;
	uint32_t first = 0, count = 0;
	bool local = false; // IBV_COLL_JOB_ATTR_LOCAL
	std::vector<ibv_coll_mr *> mrs;
	JQp(ibv_coll_context *ctx, uint32_t f, uint32_t c, bool l) : first(f), count(c), local(l)
	{
		pd = ibv_alloc_coll_pd(ctx);
		cq = ibv_create_coll_cq(ctx, 64, nullptr, nullptr, 0);
		ibv_coll_qp_init_attr ia{};
		ia.send_cq = ia.recv_cq = cq;
		ia.qp_type = IBV_COLL_QPT_COLL;
		ia.cap.max_send_wr = 8;
		ia.cap.max_send_sge = 4;
		qp = ibv_create_coll_qp(pd, &ia);
	}
	~JQp()
	{
		for (ibv_coll_mr *m : mrs)
			ibv_dereg_coll_mr(m);
		if (qp)
			ibv_destroy_coll_qp(qp);
		if (cq)
			ibv_destroy_coll_cq(cq);
		if (pd)
			ibv_dealloc_coll_pd(pd);
	}
	int modify(ibv_qp_state st, const ibv_coll_job_attr *j = nullptr)
	{
		ibv_coll_qp_attr a{};
		a.qp_state = st;
		a.port_num = 1;
		a.path_mtu = IBV_MTU_1024;
		int mask = IBV_COLL_QP_STATE;
		if (st == IBV_QPS_INIT)
			mask |= IBV_COLL_QP_PORT;
		if (j) {
			a.job = j;
			mask |= IBV_COLL_QP_JOB | IBV_COLL_QP_PATH_MTU;
		}
		return ibv_modify_coll_qp(qp, &a, mask);
	}
	int rtr(ibv_coll_job_attr j)
	{
		if (local) {
			j.comp_mask |= IBV_COLL_JOB_ATTR_LOCAL;
			j.local_first = first;
			j.local_count = count;
		}
		return modify(IBV_QPS_RTR, &j);
	}
	// One completion, within ms.
	bool wait(ibv_coll_wc *wc, int ms = 20000)
	{
		auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
		while (std::chrono::steady_clock::now() < end)
			if (ibv_poll_coll_cq(cq, 1, wc) == 1)
				return true;
		return false;
	}
};


// The buffers of global ranks [first, first + q.count) for s, registered
// in q's PD, filled from the reference's input (seed).
struct RankBufs {
	CollSpec s;
	uint32_t first = 0;
	std::vector<std::vector<uint8_t>> src, dst;
	std::vector<ibv_sge> ss, ds;
	bool make(JQp &q, const CollSpec &spec, uint64_t seed, uint32_t first_rank)
	{
		s = spec;
		first = first_rank;
		const size_t es = dtype_size(s.dtype);
		src.resize(q.count);
		dst.resize(q.count);
		ss.resize(q.count);
		ds.resize(q.count);
		for (uint32_t r = 0; r < q.count; r++) {
			src[r] = make_input(s, seed, first + r, kInputNormal);
			src[r].resize(std::max<size_t>(src[r].size(), 8));
			dst[r].assign(std::max<size_t>(dst_elems(s) * es, 8), 0xee);
			ibv_coll_mr *a = ibv_reg_coll_mr(q.pd, src[r].data(), src[r].size(), 0);
			ibv_coll_mr *b = ibv_reg_coll_mr(q.pd, dst[r].data(), dst[r].size(),
							 IBV_ACCESS_LOCAL_WRITE);
			if (!a || !b)
				return false;
			q.mrs.push_back(a);
			q.mrs.push_back(b);
			ss[r] = {reinterpret_cast<uint64_t>(src[r].data()), uint32_t(src[r].size()),
				 a->lkey};
			ds[r] = {reinterpret_cast<uint64_t>(dst[r].data()), uint32_t(dst[r].size()),
				 b->lkey};
		}
		return true;
	}
	int post(JQp &q, uint64_t wr_id)
	{
		ibv_coll_send_wr w{}, *bad;
		w.wr_id = wr_id;
		set_raw(w.opcode, s.coll);
		w.send_flags = IBV_COLL_SEND_SIGNALED;
		if (s.coll != IBV_COLL_WR_BARRIER) {
			w.sg_list = ss.data();
			w.num_sge = int(q.count);
			w.wr.coll.dst_list = ds.data();
			w.wr.coll.count = s.count;
			set_raw(w.wr.coll.op, s.op);
			set_raw(w.wr.coll.dtype, s.dtype);
			w.wr.coll.root = s.root;
		}
		return ibv_post_coll_send(q.qp, &w, &bad);
	}
	// "" when every destination holds what the reference says, else why not.
	std::string check(uint64_t seed) const
	{
		for (uint32_t r = 0; r < dst.size(); r++) {
			const uint32_t g = first + r;
			std::vector<uint8_t> want = expected_output(s, seed, g, kInputNormal);
			if (want.empty()) {
				for (uint8_t b : dst[r])
					if (b != 0xee)
						return "rank " + std::to_string(g) + " written";
				continue;
			}
			int64_t bad = first_mismatch(s, dst[r].data(), want.data(), dst_elems(s));
			if (bad >= 0)
				return "coll " + std::to_string(s.coll) + " rank " +
				       std::to_string(g) + " element " + std::to_string(bad) +
				       ": " + format_elem(s.dtype, dst[r].data(), uint64_t(bad)) +
				       " want " + format_elem(s.dtype, want.data(), uint64_t(bad));
		}
		return "";
	}
};

inline CollSpec spec_of(int coll, int op, int dtype, uint64_t count, uint32_t root,
			std::vector<uint16_t> ranks)
{
	CollSpec s;
	s.coll = coll;
	s.op = op;
	s.dtype = dtype;
	s.count = count;
	s.root = root;
	s.ranks = std::move(ranks);
	return s;
}

} // namespace ibvc_test
