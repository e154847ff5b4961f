// Addresses, and what every transport shares: the copying split commit and
// the choice between a factory and the default UdpPort.
#include "net/transport.h"

#include "net/udp_port.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

namespace ibv_coll::emu {

bool IpAddr::v4() const
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(b, prefix, 12) == 0;
}

std::string IpAddr::str() const
{
	char buf[INET6_ADDRSTRLEN];
	if (v4())
		inet_ntop(AF_INET, b + 12, buf, sizeof(buf));
	else
		inet_ntop(AF_INET6, b, buf, sizeof(buf));
	return buf;
}

IpAddr IpAddr::from_v4(uint32_t be_addr)
{
	IpAddr a;
	a.b[10] = a.b[11] = 0xff;
	memcpy(a.b + 12, &be_addr, 4);
	return a;
}

void Transport::tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
				size_t trailer_len, const Endpoint &dst, const IpAddr &src)
{
	uint8_t *buf = tx_buf();
	memmove(buf + hdr_len + paylen, buf + hdr_len, trailer_len);
	if (paylen)
		memcpy(buf + hdr_len, payload, paylen);
	tx_commit(hdr_len + paylen + trailer_len, dst, src);
}

int open_transport(const TransportFactory &factory, std::unique_ptr<Transport> *out, uint16_t port,
		   bool fallback, const Impairment &imp, unsigned sockbuf, bool gso)
{
	int err;
	if (factory) {
		err = factory(out);
	} else {
		auto udp = std::make_unique<UdpPort>();
		err = udp->open(port, fallback, imp, sockbuf, gso);
		*out = std::move(udp);
	}
	if (!err && !*out)
		err = EINVAL;
	return err;
}

} // namespace ibv_coll::emu
