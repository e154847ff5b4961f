// verbs: devices (one per device libibverbs lists, named verbs_<ibdev>),
// contexts (one libibverbs context each, with its event thread) and the
// device/port/GID queries, translated into our attribute structs.
#include "verbs.h"

#include "nic/nic.h"

#include "util/log.h"

#include <endian.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

namespace ibv_coll::verbs {
namespace {

struct DeviceListDeleter {
	void operator()(ibv_device **l) const { ibv_free_device_list(l); }
};
using DeviceList = std::unique_ptr<ibv_device *[], DeviceListDeleter>;

// The netdev behind a port (RoCE: the interface its GIDs belong to), and
// its MTU; empty and 0 for InfiniBand ports.
void port_netdev(ibv_context *vctx, uint8_t port, int gid_tbl_len, ibv_coll_port_attr *a)
{
	unsigned ifindex = 0;
	for (int i = 0; i < gid_tbl_len && !ifindex; i++) {
		ibv_gid_entry e{};
		int err = ibv_query_gid_ex(vctx, port, uint32_t(i), &e, 0);
		if (!err)
			ifindex = e.ndev_ifindex;
		else if (err != ENODATA)
			break; // not an empty slot: the table cannot be read
	}
	char name[IF_NAMESIZE] = {};
	if (!ifindex || !if_indextoname(ifindex, name))
		return;
	snprintf(a->netdev, sizeof(a->netdev), "%s", name);
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return;
	ifreq ifr{};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(s, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
		a->netdev_mtu = uint32_t(ifr.ifr_mtu);
	close(s);
}

} // namespace

void discover(std::vector<ibv_coll_device *> &out)
{
	VerbsConfig cfg;
	if (load_config(&cfg) || cfg.disable)
		return;
	int n = 0;
	DeviceList list(ibv_get_device_list(&n));
	if (!list) {
		// ENOSYS: no RDMA subsystem in this kernel, the usual case.
		IBVC_DEBUG("verbs", "libibverbs lists no devices: {}", util::errstr(errno));
		return;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[size_t(i)]);
		if (!name || !config_admits(cfg, name))
			continue;
		auto d = std::make_unique<Device>();
		d->ops = provider.ops;
		d->ibdev = name;
		d->name = "verbs_" + d->ibdev;
		out.push_back(d.get());
		d.release();
	}
}

Context::~Context()
{
	// The engine's transport holds objects of vctx.
	nic.reset();
	stop_events(this);
	if (vch && ibv_destroy_comp_channel(vch))
		IBVC_WARN("verbs", "{}: destroying the completion channel: {}", dev->name,
			  util::errstr(errno));
	if (vctx && ibv_close_device(vctx))
		IBVC_WARN("verbs", "{}: closing: {}", dev->name, util::errstr(errno));
}

core::Context *open_device(ibv_coll_device *dev_)
{
	auto *dev = static_cast<Device *>(dev_);
	auto ctx = std::make_unique<Context>();
	ctx->dev = dev;
	// The device may have gone since the list was made: look it up again.
	int n = 0;
	DeviceList list(ibv_get_device_list(&n));
	int err = ENODEV;
	for (int i = 0; list && i < n && !ctx->vctx; i++) {
		if (dev->ibdev != ibv_get_device_name(list[size_t(i)]))
			continue;
		ctx->vctx = ibv_open_device(list[size_t(i)]);
		err = ctx->vctx ? 0 : verr(-1);
	}
	list.reset();
	if (!ctx->vctx) {
		errno = err;
		return nullptr;
	}
	ibv_device_attr da;
	if ((err = ibv_query_device(ctx->vctx, &da))) {
		errno = verr(err);
		return nullptr;
	}
	for (int p = 1; p <= da.phys_port_cnt; p++) {
		ibv_port_attr pa;
		Context::Port port;
		if (ibv_query_port(ctx->vctx, uint8_t(p), &pa) == 0)
			port = {pa.link_layer, pa.gid_tbl_len};
		ctx->ports.push_back(port);
	}
	if (!(ctx->vch = ibv_create_comp_channel(ctx->vctx))) {
		errno = verr(-1);
		return nullptr;
	}
	if ((err = start_events(ctx.get()))) {
		errno = err;
		return nullptr;
	}
	// Every CQ's events go through the one event thread: one vector.
	ctx->pub.num_comp_vectors = 1;
	start_engine(ctx.get());
	IBVC_DEBUG("verbs", "{}: opened ({} ports)", dev->name, int(da.phys_port_cnt));
	return ctx.release();
}

int close_device(core::Context *c)
{
	delete to_verbs(c);
	return 0;
}

int query_device(core::Context *c, ibv_coll_device_attr *a)
{
	Context *ctx = to_verbs(c);
	ibv_device_attr v;
	if (int err = ibv_query_device(ctx->vctx, &v))
		return verr(err);
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", v.fw_ver);
	a->node_guid = be64toh(v.node_guid); // ours is in host order
	a->vendor_id = v.vendor_id;
	a->vendor_part_id = v.vendor_part_id;
	a->hw_ver = v.hw_ver;
	a->phys_port_cnt = v.phys_port_cnt;
	a->max_mr_size = v.max_mr_size;
	a->page_size_cap = v.page_size_cap;
	auto u = [](int x) { return x > 0 ? uint32_t(x) : 0u; };
	a->max_qp = u(v.max_qp);
	a->max_qp_wr = u(v.max_qp_wr);
	a->max_sge = u(v.max_sge);
	a->max_cq = u(v.max_cq);
	a->max_cqe = u(v.max_cqe);
	a->max_mr = u(v.max_mr);
	a->max_pd = u(v.max_pd);
	a->max_qp_rd_atom = u(v.max_qp_rd_atom);
	a->max_qp_init_rd_atom = u(v.max_qp_init_rd_atom);
	// libibverbs has the message size per port: take the first port's.
	ibv_port_attr pa;
	if (v.phys_port_cnt && ibv_query_port(ctx->vctx, 1, &pa) == 0)
		a->max_msg_sz = pa.max_msg_sz;
	return 0;
}

int query_port(core::Context *c, uint8_t port, ibv_coll_port_attr *a)
{
	Context *ctx = to_verbs(c);
	if (port < 1 || port > ctx->ports.size())
		return EINVAL;
	ibv_port_attr v;
	if (int err = ibv_query_port(ctx->vctx, port, &v))
		return verr(err);
	memset(a, 0, sizeof(*a));
	a->state = v.state;
	a->max_mtu = v.max_mtu;
	a->active_mtu = v.active_mtu;
	a->gid_tbl_len = v.gid_tbl_len;
	a->max_msg_sz = v.max_msg_sz;
	a->link_layer = v.link_layer;
	if (v.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a->udp_port = kRoceUdpPort;
		port_netdev(ctx->vctx, port, v.gid_tbl_len, a);
	}
	return 0;
}

int query_gid(core::Context *c, uint8_t port, int index, ibv_gid *gid)
{
	Context *ctx = to_verbs(c);
	if (port < 1 || port > ctx->ports.size() || index < 0 ||
	    index >= ctx->ports[port - 1].gid_tbl_len)
		return EINVAL;
	// The device's own table, index for index: sgid_index means the same
	// here as in libibverbs (an unused entry reads as all zeros).
	errno = 0; // libibverbs does not always set it
	if (ibv_query_gid(ctx->vctx, port, index, gid))
		return verr(-1);
	return 0;
}

} // namespace ibv_coll::verbs
