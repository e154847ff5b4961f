// crxe: devices (one per usable netdev), contexts (one emulated NIC each)
// and the device/port/GID queries.
#include "crxe.h"

#include "devd/devd_client.h"
#include "util/log.h"

#include <algorithm>
#include <cstring>

namespace ibv_coll::crxe {

void discover(std::vector<ibv_coll_device *> &out)
{
	CrxeConfig cfg;
	if (load_config(&cfg))
		return;
	std::vector<Netdev> nds;
	if (list_netdevs(&nds))
		return;
	for (Netdev &nd : nds) {
		if (!cfg.devices.empty() &&
		    std::find(cfg.devices.begin(), cfg.devices.end(), nd.name) == cfg.devices.end())
			continue;
		if (!nd.up || nd.addrs.empty() || !active_mtu_for(nd.mtu))
			continue;
		auto d = std::make_unique<Device>();
		d->ops = provider.ops;
		d->name = "crxe_" + nd.name;
		d->nd = std::move(nd);
		out.push_back(d.get());
		d.release(); // out owns it now
	}
}

// The device failed for good: the shared device's daemon died
// (devd_client.cc flushed the work), or the engine of this process's NIC
// met an internal error (nic/engine.cc flushed it).
static void device_fatal(void *arg)
{
	ibv_coll_async_event ev{};
	ev.event_type = IBV_EVENT_DEVICE_FATAL;
	ev.element.port_num = 1;
	core::async_event(static_cast<Context *>(arg), ev);
}

core::Context *open_device(ibv_coll_device *dev_)
{
	auto *dev = static_cast<Device *>(dev_);
	auto ctx = std::make_unique<Context>();
	ctx->dev = dev;
	// A value of IBV_COLL_CRXE_SHARED that is not a boolean fails the open
	// (EINVAL), as any other variable's does, rather than pick a NIC.
	CrxeConfig cfg;
	int err = load_config(&cfg);
	ctx->shared = cfg.shared;
	if (!err && ctx->shared) {
		err = devd::open_client(dev->nd.name, devd_start(dev->nd.name), &ctx->nic,
					device_fatal, ctx.get());
		if (!err) {
			// The daemon's NIC has the addresses the netdev has now.
			Netdev nd;
			if (netdev_state(dev->nd.name, &nd) == 0 && !nd.addrs.empty())
				dev->nd.addrs = nd.addrs;
			ctx->gids = dev->nd.addrs;
		}
	} else if (!err) {
		emu::NicParams p;
		err = nic_params(dev->nd.name, &p);
		p.on_fatal = device_fatal;
		p.fatal_arg = ctx.get();
		if (!err) {
			// The address list may have changed since discovery.
			dev->nd.addrs = p.gids;
			ctx->gids = p.gids;
			std::unique_ptr<emu::Nic> nic;
			err = emu::Nic::create(p, &nic);
			ctx->nic = std::move(nic);
		}
	}
	if (err) {
		errno = err;
		return nullptr;
	}
	ctx->pub.num_comp_vectors = 1;
	return ctx.release();
}

int close_device(core::Context *c)
{
	delete to_crxe(c);
	return 0;
}

int query_device(core::Context *c, ibv_coll_device_attr *a)
{
	Context *ctx = to_crxe(c);
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "ibv_coll-emu 0.1");
	// A locally administered EUI-64 from the netdev index and UDP port.
	a->node_guid = 0x0200000000000000ull | uint64_t(ctx->dev->nd.ifindex) << 16 |
		       ctx->nic->udp_port();
	a->vendor_id = 0xffffff;
	a->vendor_part_id = 0xc0;
	a->hw_ver = 1;
	a->phys_port_cnt = 1;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 4096;
	a->max_qp = emu::kMaxQps;
	a->max_qp_wr = kMaxQpWr;
	a->max_sge = kMaxSge;
	a->max_cq = emu::kMaxCqs;
	a->max_cqe = kMaxCqe;
	a->max_mr = emu::kMaxMrs;
	a->max_pd = emu::kMaxPds;
	a->max_qp_rd_atom = 128;
	a->max_qp_init_rd_atom = 128;
	a->max_msg_sz = kMaxMsg;
	return 0;
}

static ibv_mtu mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 4096: return IBV_MTU_4096;
	case 2048: return IBV_MTU_2048;
	case 1024: return IBV_MTU_1024;
	case 512: return IBV_MTU_512;
	default: return IBV_MTU_256;
	}
}

int query_port(core::Context *c, uint8_t port, ibv_coll_port_attr *a)
{
	Context *ctx = to_crxe(c);
	if (port != 1)
		return EINVAL;
	Netdev nd;
	int err = netdev_state(ctx->dev->nd.name, &nd);
	if (err == ENODEV)
		nd = Netdev{}; // the netdev went away: the port is down
	else if (err)
		return err;
	memset(a, 0, sizeof(*a));
	a->state = nd.up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = mtu_enum(ctx->nic->active_mtu());
	a->gid_tbl_len = int(ctx->gids.size());
	a->max_msg_sz = kMaxMsg;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	a->udp_port = ctx->nic->udp_port();
	a->netdev_mtu = nd.mtu;
	snprintf(a->netdev, sizeof(a->netdev), "%s", ctx->dev->nd.name.c_str());
	return 0;
}

int query_gid(core::Context *c, uint8_t port, int index, ibv_gid *gid)
{
	Context *ctx = to_crxe(c);
	const auto &gids = ctx->gids;
	if (port != 1 || index < 0 || size_t(index) >= gids.size())
		return EINVAL;
	memcpy(gid->raw, gids[size_t(index)].b, 16);
	return 0;
}

} // namespace ibv_coll::crxe
