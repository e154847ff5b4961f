// The provider registry: the providers linked into the library, and the
// EOPNOTSUPP defaults that fill the gaps in their ops tables.
#include "core.h"

#include <mutex>

namespace ibv_coll::crxe {
extern const core::Provider provider;
}
namespace ibv_coll::verbs {
extern const core::Provider provider;
}

namespace ibv_coll::core {
namespace {

// Defaults for missing ops, in the manner of libibverbs' dummy_ops.c.
template <class... A> int unsupported_int(A...)
{
	return EOPNOTSUPP;
}
template <class R, class... A> R *unsupported_ptr(A...)
{
	errno = EOPNOTSUPP;
	return nullptr;
}

template <class R, class... A> void fill(R *(*&op)(A...))
{
	if (!op)
		op = unsupported_ptr<R, A...>;
}
template <class... A> void fill(int (*&op)(A...))
{
	if (!op)
		op = unsupported_int<A...>;
}

ProviderOps complete(const ProviderOps &in)
{
	ProviderOps o = in;
	fill(o.open_device);
	fill(o.close_device);
	fill(o.query_device);
	fill(o.query_port);
	fill(o.query_gid);
	fill(o.alloc_pd);
	fill(o.dealloc_pd);
	fill(o.reg_mr);
	fill(o.dereg_mr);
	fill(o.create_cq);
	fill(o.destroy_cq);
	fill(o.poll_cq);
	fill(o.req_notify_cq);
	fill(o.create_qp);
	fill(o.destroy_qp);
	fill(o.modify_qp);
	fill(o.query_qp);
	fill(o.post_send);
	fill(o.post_recv);
	fill(o.query_caps);
	fill(o.query_counters);
	return o;
}

// The emulated devices first, then the real ones libibverbs finds.
const Provider *const kBuiltIn[] = {&crxe::provider, &verbs::provider};
constexpr size_t kNumProviders = std::size(kBuiltIn);

struct Registry {
	ProviderOps ops[kNumProviders];
	Provider provs[kNumProviders];
	const Provider *list[kNumProviders];
};

} // namespace

std::span<const Provider *const> providers()
{
	static const Registry *reg = [] {
		auto *r = new Registry();
		for (size_t i = 0; i < kNumProviders; i++) {
			r->ops[i] = complete(*kBuiltIn[i]->ops);
			r->provs[i] = *kBuiltIn[i];
			r->provs[i].ops = &r->ops[i];
			r->list[i] = &r->provs[i];
		}
		return r;
	}();
	return reg->list;
}

} // namespace ibv_coll::core
