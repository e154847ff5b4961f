// verbs: the provider's one ops table.
#include "verbs.h"

namespace ibv_coll::verbs {
namespace {

const core::ProviderOps kOps = {
	.open_device = open_device,
	.close_device = close_device,
	.query_device = query_device,
	.query_port = query_port,
	.query_gid = query_gid,
	.alloc_pd = alloc_pd,
	.dealloc_pd = dealloc_pd,
	.reg_mr = reg_mr,
	.dereg_mr = dereg_mr,
	.create_cq = create_cq,
	.destroy_cq = destroy_cq,
	.poll_cq = poll_cq,
	.req_notify_cq = req_notify_cq,
	.create_qp = create_qp,
	.destroy_qp = destroy_qp,
	.modify_qp = modify_qp,
	.query_qp = query_qp,
	.post_send = post_send,
	.post_recv = post_recv,
	.query_caps = query_caps,
	.query_counters = query_counters,
};

} // namespace

const core::Provider provider = {
	.name = "verbs",
	.discover = discover,
	.ops = &kOps,
};

} // namespace ibv_coll::verbs
