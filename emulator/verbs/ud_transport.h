// The engine's second transport: every packet (BTH to ICRC, exactly what
// UdpPort would put in a UDP datagram) travels as the payload of a UD SEND
// on a libibverbs device, so the collective engine and the switch run over
// kernel Soft-RoCE (rdma_rxe) or a real RDMA NIC.  A packet goes to the
// address of its Endpoint and to the UD QP its BTH names (the destination
// collective QP, whose number is its own UD QP's, or a switch's QP).  The
// receive side learns the source address from the GRH.
#pragma once

#include "net/transport.h"

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ibv_coll::emu {

// libibverbs calls that fail give -1 with errno, a negative or a positive
// errno depending on the call and the driver: a positive errno, never 0.
inline int verr(int ret)
{
	if (ret > 0)
		return ret;
	if (ret < -1)
		return -ret;
	return errno > 0 ? errno : EIO;
}

struct UdParams {
	ibv_context *ctx = nullptr; // not owned; outlives the transport
	uint8_t port_num = 1;
	unsigned rx_depth = 512; // receive buffers on the shared receive queue
	unsigned tx_depth = 512; // send slots
	std::string name = "ud"; // for log lines
};

class UdTransport final : public Transport {
public:
	// The Q_Key every ibv_coll UD QP uses (bit 31 clear: not a controlled key).
	static constexpr uint32_t kQkey = 0x1bc0c011;
	// Bytes a UD datagram's receive buffer reserves for the GRH.
	static constexpr size_t kGrhBytes = 40;
	// How many GID table entries are looked at for usable addresses.
	static constexpr int kMaxGids = 16;

	static int open(const UdParams &p, std::unique_ptr<UdTransport> *out);
	~UdTransport() override;
	UdTransport(const UdTransport &) = delete;
	UdTransport &operator=(const UdTransport &) = delete;

	int fd() const override;
	uint16_t port() const override { return 4791; }
	bool ipv6() const override { return true; }
	uint8_t *tx_buf() override;
	void tx_commit(size_t len, const Endpoint &dst, const IpAddr &src) override;
	void tx_flush() override;
	unsigned rx_batch(RxPacket *out) override;
	int bind_qpn(uint32_t *qpn) override;
	void unbind_qpn(uint32_t qpn) override;
	const PortCounters &counters() const override { return ctr_; }
	const char *kind() const override { return "verbs-ud"; }

	// The QP every packet leaves from, and where a switch receives.
	uint32_t qpn() const;
	// The port's RoCE v2 addresses (GID and its index), IPv4-mapped first.
	const std::vector<std::pair<IpAddr, int>> &gids() const { return gids_; }
	// The port's active MTU in bytes: the largest packet it carries.
	uint32_t mtu() const { return mtu_; }

private:
	explicit UdTransport(const UdParams &p);
	int init();
	int make_qp(ibv_qp **out);
	int gid_index(const IpAddr &src) const;
	ibv_ah *ah_for(const IpAddr &dst, int sgid_index);
	void reap_sends(bool wait_one);
	void post_pending();
	void repost_rx();

	UdParams p_;
	ibv_pd *pd_ = nullptr;
	ibv_comp_channel *ch_ = nullptr;
	ibv_cq *rcq_ = nullptr, *scq_ = nullptr;
	ibv_srq *srq_ = nullptr;
	ibv_qp *qp_ = nullptr;
	std::map<uint32_t, ibv_qp *> bound_; // collective QPs' own UD QPs
	std::vector<uint8_t> rx_arena_, tx_arena_;
	ibv_mr *rx_mr_ = nullptr, *tx_mr_ = nullptr;
	uint32_t mtu_ = 0;
	size_t rx_slot_ = 0;
	std::vector<std::pair<IpAddr, int>> gids_;
	// Address handles by destination GID and source GID index (byte 16).
	std::map<std::array<uint8_t, 17>, ibv_ah *> ahs_;
	// Send slots: tx_head_ is the next to fill, in flight until completed.
	uint64_t tx_head_ = 0, tx_done_ = 0;
	std::vector<ibv_send_wr> wrs_;
	std::vector<ibv_sge> sges_;
	unsigned wr_n_ = 0;
	// Receive slots handed out by the last rx_batch, to post again, and
	// the work requests that post them (kept, not made per batch).
	std::vector<uint64_t> rx_out_;
	std::vector<ibv_recv_wr> rx_wrs_;
	std::vector<ibv_sge> rx_sges_;
	unsigned unacked_events_ = 0;
	bool armed_ = false;
	bool warned_big_ = false, warned_qpn_ = false;
	PortCounters ctr_;
};

} // namespace ibv_coll::emu
