// UdTransport: RoCE packets carried in UD datagrams of a libibverbs device.
#include "verbs/ud_transport.h"

#include "util/log.h"
#include "wire/roce.h"

#include <fcntl.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ibv_coll::emu {

namespace {

bool zero_gid(const ibv_gid &g)
{
	static const uint8_t z[16] = {};
	return !memcmp(g.raw, z, 16);
}

} // namespace

UdTransport::UdTransport(const UdParams &p) : p_(p) {}

int UdTransport::open(const UdParams &p, std::unique_ptr<UdTransport> *out)
{
	if (!p.ctx || !p.rx_depth || !p.tx_depth)
		return EINVAL;
	std::unique_ptr<UdTransport> t(new UdTransport(p));
	if (int err = t->init())
		return err;
	*out = std::move(t);
	return 0;
}

int UdTransport::init()
{
	ibv_port_attr pa{};
	if (int r = ibv_query_port(p_.ctx, p_.port_num, &pa)) {
		int err = verr(r);
		IBVC_WARN("ud", "{}: query port {}: {}", p_.name, p_.port_num, util::errstr(err));
		return err;
	}
	mtu_ = 128u << pa.active_mtu;
	for (int i = 0; i < pa.gid_tbl_len && i < kMaxGids; i++) {
		ibv_gid_entry ge{};
		if (ibv_query_gid_ex(p_.ctx, p_.port_num, uint32_t(i), &ge, 0) ||
		    ge.gid_type != IBV_GID_TYPE_ROCE_V2 || zero_gid(ge.gid))
			continue;
		IpAddr a;
		memcpy(a.b, ge.gid.raw, 16);
		gids_.emplace_back(a, i);
	}
	std::stable_partition(gids_.begin(), gids_.end(),
			      [](const std::pair<IpAddr, int> &g) { return g.first.v4(); });
	if (gids_.empty()) {
		IBVC_WARN("ud", "{}: port {} has no RoCE v2 GID among its first {}", p_.name,
			  p_.port_num, kMaxGids);
		return ENODEV;
	}
	pd_ = ibv_alloc_pd(p_.ctx);
	ch_ = pd_ ? ibv_create_comp_channel(p_.ctx) : nullptr;
	if (!pd_ || !ch_)
		return verr(-1);
	int fl = fcntl(ch_->fd, F_GETFL);
	if (fl < 0 || fcntl(ch_->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	rcq_ = ibv_create_cq(p_.ctx, int(p_.rx_depth), nullptr, ch_, 0);
	scq_ = rcq_ ? ibv_create_cq(p_.ctx, int(p_.tx_depth), nullptr, nullptr, 0) : nullptr;
	if (!rcq_ || !scq_) {
		int err = verr(-1);
		IBVC_WARN("ud", "{}: create cq: {}", p_.name, util::errstr(err));
		return err;
	}
	ibv_srq_init_attr sa{};
	sa.attr.max_wr = p_.rx_depth;
	sa.attr.max_sge = 1;
	srq_ = ibv_create_srq(pd_, &sa);
	if (!srq_) {
		int err = verr(-1);
		IBVC_WARN("ud", "{}: create srq: {}", p_.name, util::errstr(err));
		return err;
	}
	rx_slot_ = kGrhBytes + mtu_;
	rx_arena_.assign(rx_slot_ * p_.rx_depth, 0);
	// Send slots have the room every transport's tx_buf() promises;
	// tx_commit() drops what the MTU does not carry.
	tx_arena_.assign(kMaxPacket * p_.tx_depth, 0);
	rx_mr_ = ibv_reg_mr_iova2(pd_, rx_arena_.data(), rx_arena_.size(),
				  reinterpret_cast<uintptr_t>(rx_arena_.data()),
				  IBV_ACCESS_LOCAL_WRITE);
	tx_mr_ = rx_mr_ ? ibv_reg_mr_iova2(pd_, tx_arena_.data(), tx_arena_.size(),
					   reinterpret_cast<uintptr_t>(tx_arena_.data()), 0)
			: nullptr;
	if (!rx_mr_ || !tx_mr_) {
		int err = verr(-1);
		IBVC_WARN("ud", "{}: reg mr: {}", p_.name, util::errstr(err));
		return err;
	}
	rx_wrs_.resize(p_.rx_depth);
	rx_sges_.resize(p_.rx_depth);
	for (uint64_t i = 0; i < p_.rx_depth; i++)
		rx_out_.push_back(i);
	repost_rx();
	if (!rx_out_.empty())
		return EIO;
	if (int err = make_qp(&qp_))
		return err;
	wrs_.resize(kBatch);
	sges_.resize(kBatch);
	if (int r = ibv_req_notify_cq(rcq_, 0))
		return verr(r);
	armed_ = true;
	IBVC_INFO("ud", "{}: UD QP {:#x}, mtu {}, {} GIDs, first {}", p_.name, qp_->qp_num, mtu_,
		  gids_.size(), gids_[0].first.str());
	return 0;
}

int UdTransport::make_qp(ibv_qp **out)
{
	ibv_qp_init_attr ia{};
	ia.send_cq = scq_;
	ia.recv_cq = rcq_;
	ia.srq = srq_;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = p_.tx_depth;
	ia.cap.max_send_sge = 1;
	ibv_qp *qp = ibv_create_qp(pd_, &ia);
	if (!qp) {
		int err = verr(-1);
		IBVC_WARN("ud", "{}: create UD QP: {}", p_.name, util::errstr(err));
		return err;
	}
	ibv_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = p_.port_num;
	a.qkey = kQkey;
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (!r) {
		a = {};
		a.qp_state = IBV_QPS_RTR;
		r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	}
	if (!r) {
		a = {};
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (r) {
		int err = verr(r);
		IBVC_WARN("ud", "{}: UD QP to RTS: {}", p_.name, util::errstr(err));
		ibv_destroy_qp(qp);
		return err;
	}
	*out = qp;
	return 0;
}

UdTransport::~UdTransport()
{
	if (qp_ && scq_) {
		post_pending();
		// Sends still in flight finish (or fail) quickly; their slots
		// must not be freed under the device.
		for (int i = 0; i < 1000 && tx_done_ < tx_head_ - wr_n_; i++)
			reap_sends(false), sched_yield();
	}
	for (auto &kv : bound_)
		ibv_destroy_qp(kv.second);
	if (qp_)
		ibv_destroy_qp(qp_);
	for (auto &kv : ahs_)
		ibv_destroy_ah(kv.second);
	if (srq_)
		ibv_destroy_srq(srq_);
	if (rx_mr_)
		ibv_dereg_mr(rx_mr_);
	if (tx_mr_)
		ibv_dereg_mr(tx_mr_);
	if (rcq_) {
		if (unacked_events_)
			ibv_ack_cq_events(rcq_, unacked_events_);
		ibv_destroy_cq(rcq_);
	}
	if (scq_)
		ibv_destroy_cq(scq_);
	if (ch_)
		ibv_destroy_comp_channel(ch_);
	if (pd_)
		ibv_dealloc_pd(pd_);
}

int UdTransport::fd() const
{
	return ch_->fd;
}

uint32_t UdTransport::qpn() const
{
	return qp_->qp_num;
}

int UdTransport::bind_qpn(uint32_t *qpn)
{
	ibv_qp *qp;
	if (int err = make_qp(&qp))
		return err;
	bound_[qp->qp_num] = qp;
	*qpn = qp->qp_num;
	return 0;
}

void UdTransport::unbind_qpn(uint32_t qpn)
{
	auto it = bound_.find(qpn);
	if (it == bound_.end())
		return;
	ibv_destroy_qp(it->second);
	bound_.erase(it);
}

int UdTransport::gid_index(const IpAddr &src) const
{
	for (const auto &g : gids_)
		if (g.first == src)
			return g.second;
	return gids_[0].second;
}

ibv_ah *UdTransport::ah_for(const IpAddr &dst, int sgid_index)
{
	std::array<uint8_t, 17> key;
	memcpy(key.data(), dst.b, 16);
	key[16] = uint8_t(sgid_index);
	auto it = ahs_.find(key);
	if (it != ahs_.end())
		return it->second;
	ibv_ah_attr a{};
	a.is_global = 1;
	memcpy(a.grh.dgid.raw, dst.b, 16);
	a.grh.sgid_index = uint8_t(sgid_index);
	a.grh.hop_limit = 64;
	a.port_num = p_.port_num;
	ibv_ah *ah = ibv_create_ah(pd_, &a);
	if (!ah) {
		IBVC_WARN("ud", "{}: address handle for {}: {}", p_.name, dst.str(),
			  util::errstr(verr(-1)));
		return nullptr;
	}
	ahs_.emplace(key, ah);
	return ah;
}

void UdTransport::reap_sends(bool wait_one)
{
	ibv_wc wc[32];
	for (;;) {
		int n = ibv_poll_cq(scq_, 32, wc);
		if (n < 0) {
			IBVC_ERR("ud", "{}: poll send cq failed", p_.name);
			return;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				ctr_.tx_errors++;
				IBVC_WARN("ud", "{}: send completed with status {}", p_.name,
					  int(wc[i].status));
			}
		}
		tx_done_ += uint64_t(n);
		if (n || !wait_one)
			return;
		sched_yield();
	}
}

void UdTransport::post_pending()
{
	if (!wr_n_)
		return;
	for (unsigned i = 0; i + 1 < wr_n_; i++)
		wrs_[i].next = &wrs_[i + 1];
	wrs_[wr_n_ - 1].next = nullptr;
	ibv_send_wr *bad = nullptr;
	ctr_.tx_syscalls++;
	if (int r = ibv_post_send(qp_, &wrs_[0], &bad)) {
		// What did not go never completes: count it as done.
		unsigned lost = bad ? unsigned(bad - &wrs_[0]) : 0;
		lost = wr_n_ - lost;
		ctr_.tx_errors += lost;
		tx_done_ += lost;
		IBVC_WARN("ud", "{}: post send: {}", p_.name, util::errstr(verr(r)));
	}
	wr_n_ = 0;
}

uint8_t *UdTransport::tx_buf()
{
	if (tx_head_ - tx_done_ >= p_.tx_depth) {
		post_pending();
		reap_sends(true);
	}
	return &tx_arena_[size_t(tx_head_ % p_.tx_depth) * kMaxPacket];
}

void UdTransport::tx_commit(size_t len, const Endpoint &dst, const IpAddr &src)
{
	uint8_t *buf = &tx_arena_[size_t(tx_head_ % p_.tx_depth) * kMaxPacket];
	if (len > mtu_) {
		ctr_.tx_errors++;
		if (!warned_big_)
			IBVC_WARN("ud",
				  "{}: a {}-byte packet does not fit the {}-byte UD MTU; dropped",
				  p_.name, len, mtu_);
		warned_big_ = true;
		return;
	}
	const uint32_t qpn = wire::Bth::load(buf).dqpn;
	if (!qpn) {
		ctr_.tx_errors++;
		if (!warned_qpn_)
			IBVC_WARN("ud",
				  "{}: a packet for {} names no QP (a switch address without "
				  "qp_num?); dropped",
				  p_.name, dst.ip.str());
		warned_qpn_ = true;
		return;
	}
	ibv_ah *ah = ah_for(dst.ip, gid_index(src));
	if (!ah) {
		ctr_.tx_errors++;
		return;
	}
	ibv_sge &s = sges_[wr_n_];
	s.addr = reinterpret_cast<uintptr_t>(buf);
	s.length = uint32_t(len);
	s.lkey = tx_mr_->lkey;
	ibv_send_wr &w = wrs_[wr_n_];
	w = {};
	w.wr_id = tx_head_;
	w.sg_list = &s;
	w.num_sge = 1;
	w.opcode = IBV_WR_SEND;
	w.send_flags = IBV_SEND_SIGNALED;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = kQkey;
	tx_head_++;
	wr_n_++;
	ctr_.tx_packets++;
	ctr_.tx_bytes += len;
	if (wr_n_ == kBatch)
		post_pending();
}

void UdTransport::tx_flush()
{
	post_pending();
	if (tx_head_ != tx_done_)
		reap_sends(false);
}

void UdTransport::repost_rx()
{
	if (rx_out_.empty())
		return;
	ibv_recv_wr *w = rx_wrs_.data();
	ibv_sge *s = rx_sges_.data();
	const size_t n = rx_out_.size();
	for (size_t i = 0; i < n; i++) {
		s[i].addr = reinterpret_cast<uintptr_t>(&rx_arena_[rx_out_[i] * rx_slot_]);
		s[i].length = uint32_t(rx_slot_);
		s[i].lkey = rx_mr_->lkey;
		w[i].wr_id = rx_out_[i];
		w[i].sg_list = &s[i];
		w[i].num_sge = 1;
		w[i].next = i + 1 < n ? &w[i + 1] : nullptr;
	}
	ibv_recv_wr *bad = nullptr;
	if (int r = ibv_post_srq_recv(srq_, &w[0], &bad)) {
		IBVC_ERR("ud", "{}: post receive: {}", p_.name, util::errstr(verr(r)));
		size_t done = bad ? size_t(bad - &w[0]) : 0;
		rx_out_.erase(rx_out_.begin(), rx_out_.begin() + long(done));
		return;
	}
	rx_out_.clear();
}

unsigned UdTransport::rx_batch(RxPacket *out)
{
	repost_rx();
	// Take the event that woke us (only an armed CQ makes one: no read
	// while packets keep coming); the CQ is armed again below when it
	// runs dry.
	ibv_cq *ecq;
	void *ectx;
	while (armed_ && ibv_get_cq_event(ch_, &ecq, &ectx) == 0) {
		unacked_events_++;
		armed_ = false;
	}
	if (unacked_events_ >= 64) {
		ibv_ack_cq_events(rcq_, unacked_events_);
		unacked_events_ = 0;
	}
	ibv_wc wc[kBatch];
	unsigned got = 0;
	for (int pass = 0; pass < 2 && got < kBatch; pass++) {
		int n = ibv_poll_cq(rcq_, int(kBatch - got), wc);
		ctr_.rx_syscalls++;
		if (n < 0) {
			IBVC_ERR("ud", "{}: poll receive cq failed", p_.name);
			n = 0;
		}
		for (int i = 0; i < n; i++) {
			rx_out_.push_back(wc[i].wr_id);
			uint8_t *b = &rx_arena_[wc[i].wr_id * rx_slot_];
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].byte_len < kGrhBytes ||
			    !(wc[i].wc_flags & IBV_WC_GRH)) {
				ctr_.rx_errors++;
				continue;
			}
			RxPacket &p = out[got++];
			// RoCE v2 over IPv4 puts the IPv4 header in the last 20 of
			// the GRH's 40 bytes; over IPv6 the GRH is the IPv6 header.
			if ((b[0] >> 4) == 6) {
				memcpy(p.src.ip.b, b + 8, 16);
				memcpy(p.dst.b, b + 24, 16);
			} else {
				uint32_t s4, d4;
				memcpy(&s4, b + 20 + 12, 4);
				memcpy(&d4, b + 20 + 16, 4);
				p.src.ip = IpAddr::from_v4(s4);
				p.dst = IpAddr::from_v4(d4);
			}
			p.src.port = port();
			p.data = b + kGrhBytes;
			p.len = wc[i].byte_len - kGrhBytes;
			ctr_.rx_packets++;
			ctr_.rx_bytes += p.len;
		}
		if (got == kBatch || pass == 1)
			break;
		// Ran dry: arm, then look once more for what came meanwhile.
		if (!armed_) {
			ibv_req_notify_cq(rcq_, 0);
			armed_ = true;
		} else {
			break;
		}
	}
	return got;
}

} // namespace ibv_coll::emu
