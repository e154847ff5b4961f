// The device's Ethernet port: a UDP socket carrying RoCEv2.
#include "net/udp_port.h"

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace ibv_coll::emu {

struct UdpPort::Slot {
	sockaddr_in6 addr;
	iovec iov[3]; // headers, payload, trailer (or the whole packet in iov[0])
	unsigned niov;
	size_t len; // the packet's bytes
	bool ce;    // sent with ECN CE (the impairment marked it)
	alignas(cmsghdr)
		uint8_t cbuf[CMSG_SPACE(sizeof(in6_pktinfo)) + CMSG_SPACE(sizeof(in_pktinfo)) +
			     2 * CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(timespec))];
};

namespace {

// Control data of one outgoing datagram or GSO super-packet: the source
// address, for a super-packet the segment size, and for CE-marked packets
// the TOS or traffic class that replaces the socket's ECT(0).
struct TxCtl {
	alignas(cmsghdr) uint8_t cbuf[CMSG_SPACE(sizeof(in6_pktinfo)) +
				      CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))];
};

size_t pktinfo_space(const uint8_t *cbuf)
{
	return reinterpret_cast<const cmsghdr *>(cbuf)->cmsg_len <= CMSG_LEN(sizeof(in_pktinfo))
		       ? CMSG_SPACE(sizeof(in_pktinfo))
		       : CMSG_SPACE(sizeof(in6_pktinfo));
}

} // namespace

// Fill cbuf (a TxCtl's) with a datagram's control messages; returns their
// length.
size_t UdpPort::build_ctl(const Slot &s, size_t gso_seg, uint8_t *cbuf)
{
	size_t len = pktinfo_space(s.cbuf);
	memcpy(cbuf, s.cbuf, len);
	if (gso_seg) {
		cmsghdr *c = reinterpret_cast<cmsghdr *>(cbuf + len);
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
		uint16_t gs = uint16_t(gso_seg);
		memcpy(CMSG_DATA(c), &gs, sizeof(gs));
		len += CMSG_SPACE(sizeof(uint16_t));
	}
	if (s.ce) {
		cmsghdr *c = reinterpret_cast<cmsghdr *>(cbuf + len);
		const bool v4 = s.addr.sin6_family != AF_INET6 ||
				IN6_IS_ADDR_V4MAPPED(&s.addr.sin6_addr);
		c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
		c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		int tos = kEcnCe;
		memcpy(CMSG_DATA(c), &tos, sizeof(tos));
		len += CMSG_SPACE(sizeof(int));
	}
	return len;
}

UdpPort::UdpPort() = default;
UdpPort::~UdpPort()
{
	if (fd_)
		tx_flush();
}

static int try_bind(int fd, bool v6, uint16_t port)
{
	if (v6) {
		sockaddr_in6 a{};
		a.sin6_family = AF_INET6;
		a.sin6_addr = in6addr_any;
		a.sin6_port = htons(port);
		return bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) ? errno : 0;
	}
	sockaddr_in a{};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	a.sin_port = htons(port);
	return bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) ? errno : 0;
}

int UdpPort::open(uint16_t port, bool fallback, const Impairment &imp, unsigned sockbuf, bool gso,
		  bool reuseport)
{
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	v6_ = fd >= 0;
	if (fd >= 0) {
		int off = 0;
		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off))) {
			::close(fd);
			fd = -1;
			v6_ = false;
		}
	}
	if (fd < 0)
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		IBVC_ERR("port", "socket: {}", util::errstr(err));
		return err;
	}
	fd_.reset(fd);

	int on = 1;
	if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on))) {
		int err = errno;
		IBVC_ERR("port", "SO_REUSEPORT: {}", util::errstr(err));
		fd_.reset();
		return err;
	}
	int err = try_bind(fd, v6_, port);
	if (err == EADDRINUSE && fallback && port) {
		IBVC_INFO("port", "udp port {} is in use, taking a free one", port);
		err = try_bind(fd, v6_, 0);
	}
	if (err) {
		IBVC_ERR("port", "bind udp port {}: {}", port, util::errstr(err));
		fd_.reset();
		return err;
	}
	sockaddr_in6 a{};
	socklen_t alen = sizeof(a);
	getsockname(fd, reinterpret_cast<sockaddr *>(&a), &alen);
	port_ = ntohs(a.sin6_port); // sin_port sits at the same offset

	// Big socket buffers absorb a window of packets while the engine
	// sleeps; as root, go past rmem_max.
	int sz = int(sockbuf);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));

	// Learn each datagram's destination address (the ICRC covers it), and
	// send with DF set and IP identification 0, so the IPv4 header the
	// ICRC covers is the one on the wire.
	setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof(on));
	int probe = IP_PMTUDISC_PROBE;
	setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof(probe));
	if (v6_) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof(on));
		int probe6 = IPV6_PMTUDISC_PROBE;
		setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe6, sizeof(probe6));
	}
	ask_errors();
	// ECN-capable transport, as RoCEv2 NICs send (ECT(0)): a network that
	// marks instead of dropping may then set CE, and the receiver learns
	// the marks from each datagram's TOS or traffic class.  The ICRC masks
	// these bits, so a mark does not break it.
	int tos = kEcnEct0;
	if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)))
		IBVC_INFO("port", "cannot send ECN-capable IPv4 (IP_TOS): {}", util::errstr(errno));
	setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof(on));
	if (v6_) {
		if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos)))
			IBVC_INFO("port", "cannot send ECN-capable IPv6 (IPV6_TCLASS): {}",
				  util::errstr(errno));
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof(on));
	}

	// The kernel's receive timestamp of each datagram: the time a packet
	// then waits for this process (a busy host runs it late) is the
	// endpoint's delay, which congestion control must not take for a
	// queue in the network (nic/cc.h).
	if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)))
		IBVC_INFO("port", "no receive timestamps (SO_TIMESTAMPNS): {}",
			  util::errstr(errno));

	// Segmentation offload: a run of equal-sized packets to one peer
	// leaves in one send and, where the receiver asked for GRO, arrives in
	// one receive; on the wire (and in a capture) they are the same
	// datagrams as without it.
	gso_ = false;
	gso_max_ = kGsoMax;
	if (gso) {
		int one = 1;
		gso_ = setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
		if (!gso_)
			IBVC_INFO("port", "no UDP GRO ({}); sending packet by packet",
				  util::errstr(errno));
	}

	imp_ = imp;
	opened_ns_ = util::now_ns();
	rng_.seed(imp.seed * 0x9e3779b97f4a7c15ull + port_);
	dl_.clear();
	dl_buf_.clear();
	dl_head_ = dl_n_ = 0;
	dl_last_due_ = 0;
	if (imp.delay_ns) {
		// Room for four socket buffers of packets in flight on the delay
		// line (16 MiB by default): 10 ms at 10 Gbit/s.
		size_t slots = std::max<size_t>(1024, size_t(4) * sockbuf / kMaxPacket);
		dl_.resize(slots);
		dl_buf_.assign(slots * kMaxPacket, 0);
	}
	alloc_buffers();
	return 0;
}

// Every buffer the port's passes use, made here: an allocation that fails
// fails open(), never a pass of the engine thread.
void UdpPort::alloc_buffers()
{
	tx_arena_.assign(size_t(kBatch + 1) * kMaxPacket, 0);
	tx_cur_ = 0;
	rx_arena_.assign(size_t(kRxMsgs) * kRxBuf, 0);
	rx_pending_.reserve(kRxMsgs * 64);
	rx_next_ = 0;
	tx_.reset(new Slot[kBatch]);
	tx_tmp_.reset(new Slot[kBatch]);
	rx_.reset(new Slot[kRxMsgs]);
	rx_msgs_.reset(new mmsghdr[kRxMsgs]);
	rx_dirty_ = kRxMsgs;
}

uint8_t *UdpPort::tx_buf()
{
	if (tx_n_ == kBatch)
		tx_flush();
	return cur_buf();
}

bool UdpPort::roll(double p)
{
	if (p <= 0)
		return false;
	if ((imp_.after_ns || imp_.for_ns) && !imp_.in_burst(util::now_ns() - opened_ns_))
		return false;
	return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

// The next slot, addressed to dst from src; the caller sets its iovecs.
UdpPort::Slot &UdpPort::new_slot(const Endpoint &dst, const IpAddr &src, bool ce)
{
	Slot &s = tx_[tx_n_];
	s.ce = ce;
	memset(&s.addr, 0, sizeof(s.addr));
	if (v6_) {
		s.addr.sin6_family = AF_INET6;
		memcpy(&s.addr.sin6_addr, dst.ip.b, 16);
		s.addr.sin6_port = htons(dst.port);
	} else {
		auto *a4 = reinterpret_cast<sockaddr_in *>(&s.addr);
		a4->sin_family = AF_INET;
		memcpy(&a4->sin_addr, dst.ip.b + 12, 4);
		a4->sin_port = htons(dst.port);
	}
	// The source address is fixed so that the receiver's ICRC check sees
	// the address the sender's ICRC covered.
	memset(s.cbuf, 0, sizeof(s.cbuf));
	cmsghdr *c = reinterpret_cast<cmsghdr *>(s.cbuf);
	if (src.v4()) {
		c->cmsg_level = IPPROTO_IP;
		c->cmsg_type = IP_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
		in_pktinfo pi{};
		memcpy(&pi.ipi_spec_dst, src.b + 12, 4);
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
	} else {
		c->cmsg_level = IPPROTO_IPV6;
		c->cmsg_type = IPV6_PKTINFO;
		c->cmsg_len = CMSG_LEN(sizeof(in6_pktinfo));
		in6_pktinfo pi{};
		memcpy(&pi.ipi6_addr, src.b, 16);
		memcpy(CMSG_DATA(c), &pi, sizeof(pi));
	}
	tx_n_++;
	tx_cur_ = (tx_cur_ + 1) % (kBatch + 1);
	return s;
}

// Queue a whole packet, copying it into the current buffer if it is not
// there already.
void UdpPort::queue(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src,
		    bool ce)
{
	uint8_t *buf = tx_buf();
	if (buf != data)
		memcpy(buf, data, len);
	Slot &s = new_slot(dst, src, ce);
	s.iov[0] = {buf, len};
	s.niov = 1;
	s.len = len;
	ctr_.tx_packets++;
	ctr_.tx_bytes += len;
}

void UdpPort::tx_commit(size_t len, const Endpoint &dst, const IpAddr &src)
{
	uint8_t *buf = cur_buf();
	if (imp_.active()) {
		if (roll(imp_.drop)) {
			ctr_.impair_dropped++;
			return;
		}
		if (!have_held_ && roll(imp_.reorder)) {
			held_.assign(buf, buf + len);
			held_dst_ = dst;
			held_src_ = src;
			have_held_ = true;
			ctr_.impair_reordered++;
			return;
		}
		bool dup = roll(imp_.dup);
		emit(buf, len, dst, src);
		if (dup) {
			ctr_.impair_duplicated++;
			emit(buf, len, dst, src);
		}
		if (have_held_) {
			have_held_ = false;
			emit(held_.data(), held_.size(), held_dst_, held_src_);
		}
		return;
	}
	queue(buf, len, dst, src);
}

// A packet past the drop, reorder and duplicate impairments: onto the
// delay line if there is one, else queued now; CE-marked by chance.
void UdpPort::emit(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src)
{
	if (!dl_.empty()) {
		delay_push(data, len, dst, src);
		return;
	}
	bool ce = roll(imp_.ce);
	ctr_.impair_ce += ce;
	queue(data, len, dst, src, ce);
}

void UdpPort::delay_push(const uint8_t *data, size_t len, const Endpoint &dst, const IpAddr &src)
{
	if (dl_n_ == dl_.size()) {
		if (!ctr_.impair_delay_overflow)
			IBVC_WARN("port", "delay line full ({} packets): dropping", dl_.size());
		ctr_.impair_delay_overflow++;
		return;
	}
	uint64_t due = util::now_ns() + imp_.delay_ns;
	if (imp_.jitter_ns)
		due = due - imp_.jitter_ns +
		      std::uniform_int_distribution<uint64_t>(0, 2 * imp_.jitter_ns)(rng_);
	// Jitter without reordering (reordering is its own impairment): a
	// packet never leaves before the one committed ahead of it.
	due = std::max(due, dl_last_due_);
	dl_last_due_ = due;
	size_t at = (dl_head_ + dl_n_) % dl_.size();
	bool ce = roll(imp_.ce);
	ctr_.impair_ce += ce;
	dl_[at] = Delayed{due, uint32_t(len), ce, dst, src};
	memcpy(dl_buf_.data() + at * kMaxPacket, data, len);
	dl_n_++;
	ctr_.impair_delayed++;
}

// Queue the packets whose time has come, sending whenever the batch fills.
void UdpPort::delay_release()
{
	if (!dl_n_)
		return;
	const uint64_t now = util::now_ns();
	while (dl_n_ && dl_[dl_head_].due <= now) {
		if (tx_n_ == kBatch)
			send_queued();
		const Delayed &d = dl_[dl_head_];
		queue(dl_buf_.data() + dl_head_ * kMaxPacket, d.len, d.dst, d.src, d.ce);
		dl_head_ = (dl_head_ + 1) % dl_.size();
		dl_n_--;
	}
}

uint64_t UdpPort::tx_next_due() const
{
	return dl_n_ ? dl_[dl_head_].due : 0;
}

void UdpPort::tx_commit_split(size_t hdr_len, const uint8_t *payload, size_t paylen,
			      size_t trailer_len, const Endpoint &dst, const IpAddr &src)
{
	if (imp_.active() || !paylen) // the impairments work on whole packets
		return Transport::tx_commit_split(hdr_len, payload, paylen, trailer_len, dst, src);
	uint8_t *buf = cur_buf();
	Slot &s = new_slot(dst, src);
	s.iov[0] = {buf, hdr_len};
	s.iov[1] = {const_cast<uint8_t *>(payload), paylen};
	s.iov[2] = {buf + hdr_len, trailer_len};
	s.niov = 3;
	s.len = hdr_len + paylen + trailer_len;
	const uintptr_t at = reinterpret_cast<uintptr_t>(payload),
			rx = reinterpret_cast<uintptr_t>(rx_arena_.data());
	rx_lent_ |= at >= rx && at < rx + rx_arena_.size();
	ctr_.tx_packets++;
	ctr_.tx_bytes += s.len;
}

void UdpPort::tx_reclaim(uint64_t mark)
{
	if (mark > flushes_ && tx_n_)
		tx_flush();
}

void UdpPort::tx_flush()
{
	if (have_held_) {
		have_held_ = false;
		emit(held_.data(), held_.size(), held_dst_, held_src_);
	}
	delay_release();
	send_queued();
}

void UdpPort::send_queued()
{
	if (!tx_n_)
		return;
	mmsghdr msgs[kBatch];
	iovec iovs[kBatch * 3];
	TxCtl ctl[kBatch];
	unsigned first[kBatch + 1]; // msgs[m] carries slots first[m]..first[m+1]-1
	unsigned nmsg = 0;
	if (gso_)
		group_by_peer();
	unsigned niov = 0;
	for (unsigned i = 0; i < tx_n_;) {
		Slot &s = tx_[i];
		size_t seg = s.len, total = seg;
		size_t pi = pktinfo_space(s.cbuf);
		unsigned j = i + 1;
		// Grow a run: same peer and source, every packet but the last
		// exactly seg bytes, within the kernel's segment and size limits.
		while (gso_ && j < tx_n_ && j - i < 64 && tx_[j].len <= seg &&
		       tx_[j - 1].len == seg && total + tx_[j].len <= gso_max_ &&
		       tx_[j].ce == s.ce && memcmp(&tx_[j].addr, &s.addr, sizeof(s.addr)) == 0 &&
		       memcmp(tx_[j].cbuf, s.cbuf, pi) == 0) {
			total += tx_[j].len;
			j++;
		}
		msghdr &m = msgs[nmsg].msg_hdr;
		memset(&m, 0, sizeof(m));
		m.msg_iov = &iovs[niov];
		for (unsigned k = i; k < j; k++)
			for (unsigned v = 0; v < tx_[k].niov; v++)
				iovs[niov++] = tx_[k].iov[v];
		m.msg_name = &s.addr;
		m.msg_namelen = v6_ ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
		m.msg_iovlen = size_t(&iovs[niov] - m.msg_iov);
		m.msg_control = ctl[nmsg].cbuf;
		m.msg_controllen = build_ctl(s, j - i > 1 ? seg : 0, ctl[nmsg].cbuf);
		ctr_.tx_gso += j - i > 1;
		first[nmsg++] = i;
		i = j;
	}
	first[nmsg] = tx_n_;
	unsigned done = 0;
	Backlog full;
	bool retried = false;
	while (done < nmsg) {
		int n = sendmmsg(fd_.get(), msgs + done, nmsg - done, 0);
		ctr_.tx_syscalls++;
		if (n > 0) {
			done += unsigned(n);
			full.since = 0;
			retried = false;
			continue;
		}
		int err = n < 0 ? errno : EIO;
		if (err == EINTR)
			continue;
		const msghdr &m = msgs[done].msg_hdr;
		const unsigned a = first[done], b = first[done + 1];
		if (b - a > 1 && (err == EINVAL || err == EIO || err == EOPNOTSUPP)) {
			// The kernel or the route refuses segmentation offload:
			// send this run packet by packet, and stop using it.
			IBVC_INFO("port", "UDP GSO refused ({}); sending packet by packet",
				  util::errstr(err));
			gso_ = false;
			send_singly(m, a, b, full);
			done++;
			continue;
		}
		if (err == ENOBUFS && recverr_) {
			if (b - a > 1 && below() <= 0) {
				// Nothing of ours waits in the interface's queue and
				// it has no room for the run: the run is more than
				// the queue holds (a 32 KB queue never takes a 60 KB
				// super-packet).  Shorter runs from now on.
				shorten_runs(a, b);
				send_singly(m, a, b, full);
				done++;
				continue;
			}
			if (wait_room(full))
				continue;
		} else if (recverr_ && err != EAGAIN && !retried) {
			// An ICMP error about an earlier datagram (IP_RECVERR
			// reports it on the next call), or this one's own: once
			// more, with the socket's error queue read.
			drain_errors();
			retried = true;
			continue;
		}
		// A full socket buffer, a queue that does not drain or an
		// unreachable peer loses the packet, as a wire would; reliability
		// is the transport's job.
		ctr_.tx_errors++;
		full.since = 0;
		retried = false;
		if (err != EAGAIN && err != ENOBUFS && err != ECONNREFUSED)
			IBVC_WARN("port", "sendmmsg: {}", util::errstr(err));
		done++;
	}
	tx_n_ = 0;
	flushes_++;
	rx_lent_ = false;
}

// Send slots a..b of the message m one datagram at a time, each waiting
// for room in the interface's queue as send_queued's do.
void UdpPort::send_singly(const msghdr &m, unsigned a, unsigned b, Backlog &full)
{
	for (unsigned k = a; k < b; k++) {
		msghdr one = m;
		TxCtl c1;
		one.msg_iov = tx_[k].iov;
		one.msg_iovlen = tx_[k].niov;
		one.msg_control = c1.cbuf;
		one.msg_controllen = build_ctl(tx_[k], 0, c1.cbuf);
		full.since = 0;
		for (;;) {
			ctr_.tx_syscalls++;
			if (sendmsg(fd_.get(), &one, 0) >= 0)
				break;
			const int err = errno;
			if (err == EINTR || (err == ENOBUFS && recverr_ && wait_room(full)))
				continue;
			ctr_.tx_errors++;
			break;
		}
	}
}

// The run of slots a..b did not fit the interface's queue even with none
// of ours in it: later runs stop at half its bytes (one packet at least).
void UdpPort::shorten_runs(unsigned a, unsigned b)
{
	size_t bytes = 0;
	for (unsigned k = a; k < b; k++)
		bytes += tx_[k].len;
	const size_t was = gso_max_;
	gso_max_ = std::max(bytes / 2, tx_[a].len);
	if (gso_max_ < was)
		IBVC_INFO("port",
			  "a run of {} datagrams ({} bytes) does not fit the interface's queue: "
			  "runs of at most {} bytes from now on",
			  b - a, bytes, gso_max_);
}

// Put the queued packets of each peer together, keeping each peer's own
// order (packets to different peers may pass each other, as on any
// network), so that one peer's packets can leave as one GSO send: a
// switch sending a block's result to every member otherwise alternates
// between peers and no run forms.
void UdpPort::group_by_peer()
{
	unsigned order[kBatch], n = 0;
	bool moved = false;
	uint8_t taken[kBatch] = {};
	for (unsigned i = 0; i < tx_n_; i++) {
		if (taken[i])
			continue;
		for (unsigned j = i; j < tx_n_; j++) {
			if (taken[j] || memcmp(&tx_[j].addr, &tx_[i].addr, sizeof(tx_[i].addr)))
				continue;
			taken[j] = 1;
			moved |= j != n;
			order[n++] = j;
		}
	}
	if (!moved)
		return;
	for (unsigned k = 0; k < tx_n_; k++)
		tx_tmp_[k] = tx_[order[k]];
	for (unsigned k = 0; k < tx_n_; k++)
		tx_[k] = tx_tmp_[k];
}

unsigned UdpPort::rx_batch(RxPacket *out)
{
	if (rx_next_ == rx_pending_.size() && !rx_fill())
		return 0;
	size_t n = std::min<size_t>(kBatch, rx_pending_.size() - rx_next_);
	memcpy(out, rx_pending_.data() + rx_next_, n * sizeof(RxPacket));
	rx_next_ += n;
	return unsigned(n);
}

// Each receive slot's buffer, address and control space in msgs.
// The receive headers: set up once (open() says all), and after each
// recvmmsg again only those the kernel wrote (the datagrams it returned).
void UdpPort::rx_prepare()
{
	if (rx_gso_ != gso_) {
		rx_gso_ = gso_;
		rx_dirty_ = kRxMsgs;
	}
	mmsghdr *msgs = rx_msgs_.get();
	for (unsigned i = 0; i < rx_dirty_; i++) {
		Slot &s = rx_[i];
		s.iov[0].iov_base = rx_arena_.data() + size_t(i) * kRxBuf;
		s.iov[0].iov_len = gso_ ? kRxBuf : kMaxPacket;
		msghdr &m = msgs[i].msg_hdr;
		memset(&m, 0, sizeof(m));
		m.msg_name = &s.addr;
		m.msg_namelen = sizeof(s.addr);
		m.msg_iov = s.iov;
		m.msg_iovlen = 1;
		m.msg_control = s.cbuf;
		m.msg_controllen = sizeof(s.cbuf);
	}
}

// One recvmmsg; a GRO super-packet is split back into its datagrams.
unsigned UdpPort::rx_fill()
{
	// Queued packets may carry payloads from the buffers about to be
	// overwritten.
	if (rx_lent_)
		tx_flush();
	rx_pending_.clear();
	rx_next_ = 0;
	rx_prepare();
	mmsghdr *msgs = rx_msgs_.get();
	int n = recvmmsg(fd_.get(), msgs, kRxMsgs, MSG_DONTWAIT, nullptr);
	ctr_.rx_syscalls++;
	rx_dirty_ = n > 0 ? unsigned(n) : 1; // an error may have begun the first
	if (n <= 0) {
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			// With IP_RECVERR an ICMP error about an earlier datagram
			// (a peer gone) comes here once; its copies wait in the
			// error queue.
			if (recverr_ && icmp_errno(errno)) {
				drain_errors();
				return 0;
			}
			ctr_.rx_errors++;
			IBVC_WARN("port", "recvmmsg: {}", util::errstr(errno));
		}
		return 0;
	}
	ctr_.rx_busy_syscalls++;
	ctr_.rx_datagrams += unsigned(n);
	// Socket timestamps are on the realtime clock: each becomes an age,
	// then a point on the monotonic clock every timer uses.
	const uint64_t mono = util::now_ns();
	timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	const uint64_t real = uint64_t(rt.tv_sec) * 1000000000ull + uint64_t(rt.tv_nsec);
	for (int i = 0; i < n; i++) {
		Slot &s = rx_[i];
		msghdr &m = msgs[i].msg_hdr;
		if (m.msg_flags & MSG_TRUNC) {
			ctr_.rx_errors++;
			continue;
		}
		RxPacket p;
		if (s.addr.sin6_family == AF_INET6) {
			memcpy(p.src.ip.b, &s.addr.sin6_addr, 16);
			p.src.port = ntohs(s.addr.sin6_port);
		} else {
			auto *a4 = reinterpret_cast<sockaddr_in *>(&s.addr);
			p.src.ip = IpAddr::from_v4(a4->sin_addr.s_addr);
			p.src.port = ntohs(a4->sin_port);
		}
		bool have_dst = false;
		size_t seg = 0;
		p.ecn = 0;
		p.rx_ns = mono;
		for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
				in_pktinfo pi;
				memcpy(&pi, CMSG_DATA(c), sizeof(pi));
				p.dst = IpAddr::from_v4(pi.ipi_addr.s_addr);
				have_dst = true;
			} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
				in6_pktinfo pi;
				memcpy(&pi, CMSG_DATA(c), sizeof(pi));
				memcpy(p.dst.b, &pi.ipi6_addr, 16);
				have_dst = true;
			} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
				timespec ts;
				memcpy(&ts, CMSG_DATA(c), sizeof(ts));
				const uint64_t at = uint64_t(ts.tv_sec) * 1000000000ull +
						    uint64_t(ts.tv_nsec);
				// A clock stepped since: no age rather than a wrong one.
				const uint64_t age = real > at ? real - at : 0;
				p.rx_ns = age < mono ? mono - age : mono;
			} else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
				int gs;
				memcpy(&gs, CMSG_DATA(c), sizeof(gs));
				seg = gs > 0 ? size_t(gs) : 0;
			} else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
				   (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)) {
				// IP_TOS comes as one byte, IPV6_TCLASS as an int.
				int tc = 0;
				if (c->cmsg_len >= CMSG_LEN(sizeof(int)))
					memcpy(&tc, CMSG_DATA(c), sizeof(tc));
				else
					tc = *CMSG_DATA(c);
				p.ecn = uint8_t(tc & kEcnMask);
			}
		}
		if (!have_dst) {
			ctr_.rx_errors++;
			continue;
		}
		auto *base = static_cast<uint8_t *>(s.iov[0].iov_base);
		size_t len = msgs[i].msg_len;
		if (!seg || seg >= len) {
			seg = len;
		} else {
			ctr_.rx_gro++;
		}
		// A datagram of length 0 is a packet too (the engine drops it as
		// too short): without this it would be counted nowhere.
		if (!len) {
			p.data = base;
			p.len = 0;
			rx_pending_.push_back(p);
			ctr_.rx_packets++;
			continue;
		}
		for (size_t off = 0; off < len; off += seg) {
			p.data = base + off;
			p.len = std::min(seg, len - off);
			rx_pending_.push_back(p);
			ctr_.rx_ce += p.ecn == kEcnCe;
			ctr_.rx_packets++;
			ctr_.rx_bytes += p.len;
		}
	}
	return unsigned(rx_pending_.size());
}

} // namespace ibv_coll::emu
