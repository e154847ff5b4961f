// crxe: netdev discovery over rtnetlink with libnl-route.
#include "crxe.h"

#include "util/log.h"

#include <netlink/addr.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>

#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace ibv_coll::crxe {
namespace {

struct SockDel {
	void operator()(nl_sock *s) const { nl_socket_free(s); }
};
struct CacheDel {
	void operator()(nl_cache *c) const { nl_cache_free(c); }
};
using SockPtr = std::unique_ptr<nl_sock, SockDel>;
using CachePtr = std::unique_ptr<nl_cache, CacheDel>;

int nl_errno(int nlerr)
{
	switch (-nlerr) {
	case NLE_NOMEM: return ENOMEM;
	case NLE_PERM: return EPERM;
	case NLE_NODEV: return ENODEV;
	default: return EIO;
	}
}

bool link_local6(const uint8_t *a)
{
	return a[0] == 0xfe && (a[1] & 0xc0) == 0x80;
}

struct Walk {
	std::vector<Netdev> *out;
};

} // namespace

int list_netdevs(std::vector<Netdev> *out)
{
	SockPtr sk(nl_socket_alloc());
	if (!sk)
		return ENOMEM;
	int r = nl_connect(sk.get(), NETLINK_ROUTE);
	if (r < 0) {
		IBVC_ERR("crxe", "netlink connect: {}", nl_geterror(r));
		return nl_errno(r);
	}
	nl_cache *lc = nullptr, *ac = nullptr;
	if ((r = rtnl_link_alloc_cache(sk.get(), AF_UNSPEC, &lc)) < 0) {
		IBVC_ERR("crxe", "netlink links: {}", nl_geterror(r));
		return nl_errno(r);
	}
	CachePtr links(lc);
	if ((r = rtnl_addr_alloc_cache(sk.get(), &ac)) < 0) {
		IBVC_ERR("crxe", "netlink addresses: {}", nl_geterror(r));
		return nl_errno(r);
	}
	CachePtr addrs(ac);

	std::vector<Netdev> devs;
	for (nl_object *o = nl_cache_get_first(links.get()); o; o = nl_cache_get_next(o)) {
		auto *l = reinterpret_cast<rtnl_link *>(o);
		Netdev d;
		const char *name = rtnl_link_get_name(l);
		d.name = name ? name : "";
		d.ifindex = rtnl_link_get_ifindex(l);
		d.mtu = rtnl_link_get_mtu(l);
		unsigned flags = rtnl_link_get_flags(l);
		d.loopback = flags & IFF_LOOPBACK;
		d.up = (flags & IFF_UP) && ((flags & IFF_RUNNING) || d.loopback);
		devs.push_back(std::move(d));
	}
	std::vector<emu::IpAddr> v6;
	for (Netdev &d : devs) {
		v6.clear();
		for (nl_object *o = nl_cache_get_first(addrs.get()); o; o = nl_cache_get_next(o)) {
			auto *a = reinterpret_cast<rtnl_addr *>(o);
			if (rtnl_addr_get_ifindex(a) != d.ifindex)
				continue;
			nl_addr *local = rtnl_addr_get_local(a);
			if (!local)
				continue;
			const uint8_t *bin = static_cast<const uint8_t *>(
				nl_addr_get_binary_addr(local));
			if (nl_addr_get_family(local) == AF_INET && nl_addr_get_len(local) == 4) {
				uint32_t be;
				memcpy(&be, bin, 4);
				d.addrs.push_back(emu::IpAddr::from_v4(be));
			} else if (nl_addr_get_family(local) == AF_INET6 &&
				   nl_addr_get_len(local) == 16 && !link_local6(bin)) {
				emu::IpAddr ip;
				memcpy(ip.b, bin, 16);
				v6.push_back(ip);
			}
		}
		d.addrs.insert(d.addrs.end(), v6.begin(), v6.end());
	}
	*out = std::move(devs);
	return 0;
}

int netdev_state(const std::string &name, Netdev *out)
{
	std::vector<Netdev> all;
	int err = list_netdevs(&all);
	if (err)
		return err;
	for (Netdev &d : all) {
		if (d.name == name) {
			*out = std::move(d);
			return 0;
		}
	}
	return ENODEV;
}

uint32_t active_mtu_for(uint32_t netdev_mtu)
{
	// Room for the largest header stack: IPv6 40, UDP 8, BTH 12, the
	// biggest extension headers the device sends, ICRC 4.
	constexpr uint32_t kHeaders = 128;
	for (uint32_t m = 4096; m >= 256; m >>= 1)
		if (m + kHeaders <= netdev_mtu)
			return m;
	return 0;
}

int nic_params(const std::string &netdev, emu::NicParams *p)
{
	CrxeConfig cfg;
	int err = load_config(&cfg);
	if (!err)
		err = emu::load_emu_config(&p->cfg);
	if (err)
		return err;
	Netdev nd;
	if ((err = netdev_state(netdev, &nd)))
		return err;
	if (nd.addrs.empty() || !active_mtu_for(nd.mtu))
		return ENODEV;
	p->name = "crxe_" + netdev;
	p->gids = nd.addrs;
	p->udp_port = cfg.udp_port;
	p->port_fallback = cfg.port_fallback;
	p->active_mtu = active_mtu_for(nd.mtu);
	return 0;
}

} // namespace ibv_coll::crxe
