// crxe: the provider's one ops table, and the operations that need a
// crxe context: they make the driver layer's objects on the context's NIC.
#include "crxe.h"

namespace ibv_coll::crxe {

core::Pd *alloc_pd(core::Context *c)
{
	return drv::alloc_engine_pd(to_crxe(c)->nic.get());
}

core::Cq *create_cq(core::Context *c, int cqe, core::CompChannel *)
{
	return drv::create_engine_cq(to_crxe(c)->nic.get(), cqe, nullptr);
}

int query_caps(core::Context *c, ibv_coll_caps *caps)
{
	Context *ctx = to_crxe(c);
	int err = drv::engine_caps(*ctx->nic, caps);
	if (!err && ctx->shared)
		caps->flags |= IBV_COLL_CAPS_SHARED_DEVICE;
	return err;
}

int query_counters(core::Context *c, ibv_coll_counters *o)
{
	return drv::engine_counters(*to_crxe(c)->nic, o);
}

namespace {

const core::ProviderOps kOps = {
	.open_device = open_device,
	.close_device = close_device,
	.query_device = query_device,
	.query_port = query_port,
	.query_gid = query_gid,
	.alloc_pd = alloc_pd,
	.dealloc_pd = drv::dealloc_pd,
	.reg_mr = drv::reg_mr,
	.dereg_mr = drv::dereg_mr,
	.create_cq = create_cq,
	.destroy_cq = drv::destroy_cq,
	.poll_cq = drv::poll_cq,
	.req_notify_cq = drv::req_notify_cq,
	.create_qp = drv::create_qp,
	.destroy_qp = drv::destroy_qp,
	.modify_qp = drv::modify_qp,
	.query_qp = drv::query_qp,
	.post_send = drv::post_send,
	.post_recv = drv::post_recv,
	.query_caps = query_caps,
	.query_counters = query_counters,
};

} // namespace

const core::Provider provider = {
	.name = "crxe",
	.discover = discover,
	.ops = &kOps,
};

} // namespace ibv_coll::crxe
