// Entry points for devices and contexts: the device list across providers,
// open/close and the queries.
#include "core.h"

#include <cstdlib>
#include <cstring>
#include <vector>

using namespace ibv_coll;
using namespace ibv_coll::core;

namespace {

void put_device(ibv_coll_device *d)
{
	if (d && d->refs.fetch_sub(1) == 1)
		delete d;
}

} // namespace

IBV_COLL_EXPORT ibv_coll_device **ibv_get_coll_device_list(int *num_devices)
{
	return guard_ptr<ibv_coll_device *>(
		"ibv_get_coll_device_list", [&]() -> ibv_coll_device ** {
			util::log_init();
			std::vector<ibv_coll_device *> all;
			try {
				for (const Provider *p : providers()) {
					size_t before = all.size();
					p->discover(all);
					for (size_t i = before; i < all.size(); i++)
						all[i]->ops = p->ops;
				}
			} catch (...) { // memory ran out: the devices found so far go
				for (auto *d : all)
					put_device(d);
				throw;
			}
			auto **list = static_cast<ibv_coll_device **>(
				calloc(all.size() + 1, sizeof(void *)));
			if (!list) {
				for (auto *d : all)
					put_device(d);
				errno = ENOMEM;
				return nullptr;
			}
			for (size_t i = 0; i < all.size(); i++)
				list[i] = all[i];
			if (num_devices)
				*num_devices = int(all.size());
			return list;
		});
}

IBV_COLL_EXPORT void ibv_free_coll_device_list(ibv_coll_device **list)
{
	if (!list)
		return;
	for (ibv_coll_device **d = list; *d; d++)
		put_device(*d);
	free(list);
}

IBV_COLL_EXPORT const char *ibv_get_coll_device_name(ibv_coll_device *device)
{
	if (!device) {
		errno = EINVAL;
		return nullptr;
	}
	return device->name.c_str();
}

IBV_COLL_EXPORT ibv_coll_context *ibv_open_coll_device(ibv_coll_device *device)
{
	return guard_ptr<ibv_coll_context>("ibv_open_coll_device", [&]() -> ibv_coll_context * {
		if (!device) {
			errno = EINVAL;
			return nullptr;
		}
		warn_config_once();
		Context *ctx = device->ops->open_device(device);
		if (!ctx) {
			IBVC_ERR("core", "{}: open failed: {}", device->name, util::errstr(errno));
			return nullptr;
		}
		ctx->pub.device = device;
		if (int err = async_open(ctx)) {
			IBVC_ERR("core", "{}: async event fd: {}", device->name, util::errstr(err));
			device->ops->close_device(ctx);
			errno = err;
			return nullptr;
		}
		device->refs.fetch_add(1);
		return &ctx->pub;
	});
}

IBV_COLL_EXPORT int ibv_close_coll_device(ibv_coll_context *context)
{
	return guard_int("ibv_close_coll_device", [&] {
		if (!context)
			return EINVAL;
		Context *ctx = to_core(context);
		if (ctx->children.load())
			return EBUSY;
		ibv_coll_device *dev = context->device;
		int err = dev->ops->close_device(ctx);
		if (!err)
			put_device(dev);
		return err;
	});
}

IBV_COLL_EXPORT int ibv_query_coll_device(ibv_coll_context *context, ibv_coll_device_attr *attr)
{
	return guard_int("ibv_query_coll_device", [&] {
		if (!context || !attr)
			return EINVAL;
		return context->device->ops->query_device(to_core(context), attr);
	});
}

IBV_COLL_EXPORT int ibv_query_coll_port(ibv_coll_context *context, uint8_t port_num,
					ibv_coll_port_attr *attr)
{
	return guard_int("ibv_query_coll_port", [&] {
		if (!context || !attr)
			return EINVAL;
		return context->device->ops->query_port(to_core(context), port_num, attr);
	});
}

IBV_COLL_EXPORT int ibv_query_coll_gid(ibv_coll_context *context, uint8_t port_num, int index,
				       ibv_gid *gid)
{
	return guard_int("ibv_query_coll_gid", [&] {
		if (!context || !gid)
			return EINVAL;
		return context->device->ops->query_gid(to_core(context), port_num, index, gid);
	});
}

IBV_COLL_EXPORT int ibv_query_coll_caps(ibv_coll_context *context, ibv_coll_caps *caps)
{
	return guard_int("ibv_query_coll_caps", [&] {
		if (!context || !caps)
			return EINVAL;
		return context->device->ops->query_caps(to_core(context), caps);
	});
}

IBV_COLL_EXPORT int ibv_query_coll_counters(ibv_coll_context *context, ibv_coll_counters *c)
{
	return guard_int("ibv_query_coll_counters", [&] {
		if (!context || !c)
			return EINVAL;
		return context->device->ops->query_counters(to_core(context), c);
	});
}
