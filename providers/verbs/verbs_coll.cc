// verbs: collective QPs.  The collective offload engine (emulator/) runs in
// software on the host, in front of the libibverbs device: its transport
// is emu::UdTransport, UD datagrams on the device's port, instead of the
// UDP socket crxe's engine has.  The engine's objects are crxe's (a PD per
// PD, a CQ per CQ, the collective QP itself), made on the context's engine
// and kept behind ours, so collective posting, completions and counters
// behave exactly as on crxe.  Memory regions are entered in the engine's
// table under the device's own lkeys, so a collective WR names buffers with
// the keys the application already holds.
#include "verbs.h"

#include "drv.h"
#include "nic/emu_config.h"
#include "util/log.h"
#include "verbs/ud_transport.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace ibv_coll::verbs {

void start_engine(Context *ctx)
{
	if (ctx->ports.empty() || ctx->ports[0].link_layer != IBV_LINK_LAYER_ETHERNET) {
		IBVC_INFO("verbs", "{}: port 1 is not RoCE: no collective engine", ctx->dev->name);
		return;
	}
	emu::UdParams up;
	up.ctx = ctx->vctx;
	up.port_num = 1;
	up.name = ctx->dev->name;
	std::unique_ptr<emu::UdTransport> ud;
	if (int err = emu::UdTransport::open(up, &ud)) {
		IBVC_INFO("verbs", "{}: no UD transport ({}): collective QPs are not supported",
			  ctx->dev->name, util::errstr(err));
		return;
	}
	emu::NicParams p;
	if (int err = emu::load_emu_config(&p.cfg)) {
		IBVC_WARN("verbs", "{}: bad IBV_COLL_EMU_* setting ({}): no collective engine",
			  ctx->dev->name, util::errstr(err));
		return;
	}
	p.name = ctx->dev->name;
	for (const auto &g : ud->gids())
		p.gids.push_back(g.first);
	p.udp_port = kRoceUdpPort;
	p.port_fallback = false;
	// The largest IBTA MTU whose blocks, with their headers, fit one UD
	// datagram: a collective QP's path MTU is lowered to it.
	p.active_mtu = 0;
	for (uint32_t m = 256; m <= 4096; m *= 2)
		if (m + drv::coll_packet_overhead() <= ud->mtu())
			p.active_mtu = m;
	if (!p.active_mtu) {
		IBVC_INFO("verbs", "{}: a {}-byte UD MTU is too small for collective blocks",
			  ctx->dev->name, ud->mtu());
		return;
	}
	auto holder = std::make_shared<std::unique_ptr<emu::UdTransport>>(std::move(ud));
	p.transport = [holder](std::unique_ptr<emu::Transport> *out) {
		if (!*holder)
			return EINVAL;
		*out = std::move(*holder);
		return 0;
	};
	if (int err = emu::Nic::create(p, &ctx->nic)) {
		IBVC_WARN("verbs", "{}: collective engine: {}", ctx->dev->name, util::errstr(err));
		ctx->nic.reset();
		return;
	}
	IBVC_DEBUG("verbs", "{}: collective engine on UD, blocks up to {} bytes", ctx->dev->name,
		   p.active_mtu);
}

int coll_caps(Context *ctx, ibv_coll_caps *caps)
{
	if (!ctx->nic)
		return EOPNOTSUPP;
	drv::engine_caps(*ctx->nic, caps);
	// Hierarchies need the spine's UD QP in the task information, which
	// has no room for it yet.
	caps->topologies &= ~(1u << IBV_COLL_TOPO_HIERARCHY);
	caps->max_block_len = std::min(caps->max_block_len, ctx->nic->params().active_mtu);
	return 0;
}

int coll_counters(Context *ctx, ibv_coll_counters *c)
{
	if (!ctx->nic)
		return EOPNOTSUPP;
	return drv::engine_counters(*ctx->nic, c);
}

int engine_pd(Context *ctx, Pd *pd)
{
	if (!ctx->nic)
		return 0;
	pd->epd = drv::alloc_engine_pd(ctx->nic.get());
	return pd->epd ? 0 : errno;
}

void engine_pd_free(Pd *pd)
{
	if (pd->epd && drv::dealloc_pd(pd->epd))
		IBVC_WARN("verbs", "pd {}: the engine's pd stays", pd->pub.handle);
}

int engine_mr(Pd *pd, Mr *mr, void *addr, size_t len, int access)
{
	if (!pd->epd)
		return 0;
	int err = pd->epd->nic->reg_mr_keyed(pd->epd->pdn, addr, len, uint32_t(access),
					     mr->vmr->lkey);
	if (!err)
		mr->engine = pd->epd->nic;
	return err;
}

void engine_mr_free(Mr *mr)
{
	if (mr->engine)
		mr->engine->dereg_mr(mr->vmr->lkey);
}

int engine_cq(Context *ctx, Cq *cq, int cqe)
{
	if (!ctx->nic)
		return 0;
	cq->ecq = drv::create_engine_cq(ctx->nic.get(), std::clamp<int>(cqe, 1, int(drv::kMaxCqe)),
					cq);
	return cq->ecq ? 0 : errno;
}

void engine_cq_free(Cq *cq)
{
	if (cq->ecq && drv::destroy_cq(cq->ecq))
		IBVC_WARN("verbs", "cq {}: the engine's cq stays", cq->pub.handle);
}

core::Qp *create_coll_qp(Pd *pd, ibv_coll_qp_init_attr *ia)
{
	Context *ctx = ctx_of(pd->pub.context);
	if (!ctx->nic || !pd->epd) {
		IBVC_WARN("verbs",
			  "{}: no collective engine on this device (see the log at info "
			  "level): collective QPs are not supported",
			  ctx->dev->name);
		errno = EOPNOTSUPP;
		return nullptr;
	}
	Cq *scq = to_verbs(core::to_core(ia->send_cq));
	Cq *rcq = to_verbs(core::to_core(ia->recv_cq));
	if (!scq->ecq || !rcq->ecq) {
		errno = EINVAL;
		return nullptr;
	}
	ibv_coll_qp_init_attr e = *ia;
	e.send_cq = &scq->ecq->pub;
	e.recv_cq = &rcq->ecq->pub;
	core::Qp *qp = drv::create_qp(pd->epd, &e);
	if (qp)
		ia->cap = e.cap;
	return qp;
}

int modify_coll_qp(core::Qp *qp, ibv_coll_qp_attr *a, int mask)
{
	Context *ctx = ctx_of(qp->pub.context);
	if (mask & IBV_COLL_QP_PATH_MTU) {
		// A block and its headers travel in one UD datagram.
		ibv_coll_qp_attr copy = *a;
		int m = core::raw_enum(a->path_mtu);
		if (m >= IBV_MTU_256 && m <= IBV_MTU_4096 &&
		    (128u << m) > ctx->nic->params().active_mtu) {
			int fit = IBV_MTU_256;
			while ((128u << (fit + 1)) <= ctx->nic->params().active_mtu)
				fit++;
			copy.path_mtu = ibv_mtu(fit);
			IBVC_DEBUG("verbs", "{}: collective qp {:#x}: path MTU {} lowered to {}",
				   ctx->dev->name, qp->pub.qp_num, 128u << m, 128u << fit);
		}
		return drv::modify_qp(qp, &copy, mask);
	}
	return drv::modify_qp(qp, a, mask);
}

int query_coll_qp(core::Qp *qp, ibv_coll_qp_attr *a, int mask, ibv_coll_qp_init_attr *init)
{
	int err = drv::query_qp(qp, a, mask, init);
	if (!err) {
		// Our CQs, not the engine's behind them.
		init->send_cq = qp->pub.send_cq;
		init->recv_cq = qp->pub.recv_cq;
	}
	return err;
}

} // namespace ibv_coll::verbs
