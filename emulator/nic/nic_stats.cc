// A device's counters by name, for its shared-memory segment: the names
// ibv_coll_stat(8) shows and its man page lists.  Grouped as the tool
// groups them: the port, RC, the collective engine, drops by reason, Seg
// units.
#include "nic/engine.h"
#include "nic/nic.h"

#include <iterator>

namespace ibv_coll::emu {

namespace {

struct Field {
	const char *name;
	uint64_t (*get)(const NicCounters &);
};

constexpr Field kFields[] = {
	{"tx_packets", [](const NicCounters &c) -> uint64_t { return c.port.tx_packets; }},
	{"tx_bytes", [](const NicCounters &c) -> uint64_t { return c.port.tx_bytes; }},
	{"rx_packets", [](const NicCounters &c) -> uint64_t { return c.port.rx_packets; }},
	{"rx_bytes", [](const NicCounters &c) -> uint64_t { return c.port.rx_bytes; }},
	{"tx_errors", [](const NicCounters &c) -> uint64_t { return c.port.tx_errors; }},
	{"rx_errors", [](const NicCounters &c) -> uint64_t { return c.port.rx_errors; }},
	// Sends that found the interface's queue full and waited for room.
	{"tx_queue_full", [](const NicCounters &c) -> uint64_t { return c.port.tx_full_waits; }},
	{"icmp_errors", [](const NicCounters &c) -> uint64_t { return c.port.icmp_errors; }},
	{"impair_dropped", [](const NicCounters &c) -> uint64_t { return c.port.impair_dropped; }},
	{"impair_duplicated",
	 [](const NicCounters &c) -> uint64_t { return c.port.impair_duplicated; }},
	{"impair_reordered",
	 [](const NicCounters &c) -> uint64_t { return c.port.impair_reordered; }},
	{"impair_delayed", [](const NicCounters &c) -> uint64_t { return c.port.impair_delayed; }},
	{"impair_ce", [](const NicCounters &c) -> uint64_t { return c.port.impair_ce; }},
	// CE-marked packets received: the congestion signal of an ECN network.
	{"rx_ce", [](const NicCounters &c) -> uint64_t { return c.port.rx_ce; }},
	{"rc_tx_packets", [](const NicCounters &c) -> uint64_t { return c.rc_tx_packets; }},
	{"rc_tx_bytes", [](const NicCounters &c) -> uint64_t { return c.rc_tx_bytes; }},
	{"rc_rx_packets", [](const NicCounters &c) -> uint64_t { return c.rc_rx_packets; }},
	{"rc_rx_bytes", [](const NicCounters &c) -> uint64_t { return c.rc_rx_bytes; }},
	{"rc_retransmits", [](const NicCounters &c) -> uint64_t { return c.tx_retransmits; }},
	{"rc_timeouts", [](const NicCounters &c) -> uint64_t { return c.timeouts; }},
	{"rc_seq_naks_sent", [](const NicCounters &c) -> uint64_t { return c.seq_naks_sent; }},
	{"rc_seq_naks_rcvd", [](const NicCounters &c) -> uint64_t { return c.seq_naks_rcvd; }},
	{"rc_rnr_naks_sent", [](const NicCounters &c) -> uint64_t { return c.rnr_naks_sent; }},
	{"rc_rnr_naks_rcvd", [](const NicCounters &c) -> uint64_t { return c.rnr_naks_rcvd; }},
	{"rc_acks_sent", [](const NicCounters &c) -> uint64_t { return c.acks_sent; }},
	{"rc_duplicates", [](const NicCounters &c) -> uint64_t { return c.rx_dup; }},
	{"cq_overruns", [](const NicCounters &c) -> uint64_t { return c.cq_overruns; }},
	{"coll_messages", [](const NicCounters &c) -> uint64_t { return c.coll.messages; }},
	{"coll_failed", [](const NicCounters &c) -> uint64_t { return c.coll.failed; }},
	{"coll_fallbacks", [](const NicCounters &c) -> uint64_t { return c.coll.fallbacks; }},
	{"coll_blocks", [](const NicCounters &c) -> uint64_t { return c.coll.blocks; }},
	{"coll_beside", [](const NicCounters &c) -> uint64_t { return c.coll.beside; }},
	{"coll_rx_packets", [](const NicCounters &c) -> uint64_t { return c.coll.rx_packets; }},
	{"coll_delivered", [](const NicCounters &c) -> uint64_t { return c.coll.delivered; }},
	{"coll_host_dropped", [](const NicCounters &c) -> uint64_t { return c.coll.host_dropped; }},
	{"coll_tx_data", [](const NicCounters &c) -> uint64_t { return c.coll.tx_data; }},
	{"coll_rx_data", [](const NicCounters &c) -> uint64_t { return c.coll.rx_data; }},
	{"coll_tx_result", [](const NicCounters &c) -> uint64_t { return c.coll.tx_result; }},
	{"coll_rx_result", [](const NicCounters &c) -> uint64_t { return c.coll.rx_result; }},
	{"coll_tx_bytes", [](const NicCounters &c) -> uint64_t { return c.coll.tx_bytes; }},
	{"coll_rx_bytes", [](const NicCounters &c) -> uint64_t { return c.coll.rx_bytes; }},
	{"coll_retrans_data", [](const NicCounters &c) -> uint64_t { return c.coll.retrans_data; }},
	{"coll_fast_repeats", [](const NicCounters &c) -> uint64_t { return c.coll.fast_repeats; }},
	{"coll_retrans_result",
	 [](const NicCounters &c) -> uint64_t { return c.coll.retrans_result; }},
	{"coll_reductions", [](const NicCounters &c) -> uint64_t { return c.coll.reductions; }},
	{"coll_timeouts", [](const NicCounters &c) -> uint64_t { return c.coll.timeouts; }},
	{"coll_naks_sent", [](const NicCounters &c) -> uint64_t { return c.coll.naks_sent; }},
	{"coll_naks_rcvd", [](const NicCounters &c) -> uint64_t { return c.coll.naks_rcvd; }},
	{"coll_probes", [](const NicCounters &c) -> uint64_t { return c.coll.probes; }},
	{"coll_win_holds", [](const NicCounters &c) -> uint64_t { return c.coll.win_holds; }},
	{"coll_win_held_us",
	 [](const NicCounters &c) -> uint64_t { return c.coll.win_held_ns / 1000; }},
	{"coll_aborts_sent", [](const NicCounters &c) -> uint64_t { return c.coll.aborts_sent; }},
	{"coll_aborts_rcvd", [](const NicCounters &c) -> uint64_t { return c.coll.aborts_rcvd; }},
	{"coll_early", [](const NicCounters &c) -> uint64_t { return c.coll.early_stored; }},
	// Congestion control (nic/cc.h): CNPs, window cuts by signal, blocks
	// and packets sent again before their timeout, and all bytes sent again.
	{"cc_cnp_sent", [](const NicCounters &c) -> uint64_t { return c.cc.cnp_sent; }},
	{"cc_cnp_rcvd", [](const NicCounters &c) -> uint64_t { return c.cc.cnp_rcvd; }},
	{"cc_rate_cuts", [](const NicCounters &c) -> uint64_t { return c.cc.rate_cuts; }},
	{"cc_delay_cuts", [](const NicCounters &c) -> uint64_t { return c.cc.delay_cuts; }},
	{"cc_loss_cuts", [](const NicCounters &c) -> uint64_t { return c.cc.loss_cuts; }},
	{"cc_cnp_cuts", [](const NicCounters &c) -> uint64_t { return c.cc.cnp_cuts; }},
	{"cc_fast_retrans", [](const NicCounters &c) -> uint64_t { return c.cc.fast_retrans; }},
	{"cc_reorder_waits", [](const NicCounters &c) -> uint64_t { return c.cc.reorder_waits; }},
	{"cc_spurious_retrans",
	 [](const NicCounters &c) -> uint64_t { return c.cc.spurious_retrans; }},
	{"cc_retrans_bytes", [](const NicCounters &c) -> uint64_t { return c.cc.retrans_bytes; }},
	{"cc_host_cuts", [](const NicCounters &c) -> uint64_t { return c.cc.host_cuts; }},
	{"cc_rebases", [](const NicCounters &c) -> uint64_t { return c.cc.rebases; }},
	{"cc_loss_no_queue", [](const NicCounters &c) -> uint64_t { return c.cc.loss_no_queue; }},
	{"cc_host_delay_samples",
	 [](const NicCounters &c) -> uint64_t { return c.cc.host_delay_samples; }},
	{"cc_host_delay_us", [](const NicCounters &c) -> uint64_t { return c.cc.host_delay_us; }},
	{"drop_icrc", [](const NicCounters &c) -> uint64_t { return c.rx_icrc_err; }},
	{"drop_malformed", [](const NicCounters &c) -> uint64_t { return c.rx_malformed; }},
	{"drop_no_qp", [](const NicCounters &c) -> uint64_t { return c.rx_no_qp; }},
	{"drop_bad_source", [](const NicCounters &c) -> uint64_t { return c.rx_bad_src; }},
	{"drop_bad_state", [](const NicCounters &c) -> uint64_t { return c.rx_bad_state; }},
	{"drop_coll_duplicate",
	 [](const NicCounters &c) -> uint64_t { return c.coll.dup_dropped; }},
	{"drop_coll_early", [](const NicCounters &c) -> uint64_t { return c.coll.early_dropped; }},
	{"drop_coll_stale", [](const NicCounters &c) -> uint64_t { return c.coll.stale_dropped; }},
	{"drop_coll_bad_key", [](const NicCounters &c) -> uint64_t { return c.coll.bad_key; }},
	{"drop_coll_bad_job", [](const NicCounters &c) -> uint64_t { return c.coll.bad_job; }},
	{"drop_coll_bad_block", [](const NicCounters &c) -> uint64_t { return c.coll.bad_block; }},
	{"drop_coll_bad_node", [](const NicCounters &c) -> uint64_t { return c.coll.bad_node; }},
	{"drop_coll_malformed", [](const NicCounters &c) -> uint64_t { return c.coll.malformed; }},
	{"drop_coll_seg_busy", [](const NicCounters &c) -> uint64_t { return c.coll.seg_busy; }},
	{"seg_units", [](const NicCounters &c) -> uint64_t { return c.seg_units; }},
	{"seg_in_use", [](const NicCounters &c) -> uint64_t { return c.seg_in_use; }},
	{"seg_high_water", [](const NicCounters &c) -> uint64_t { return c.seg_high_water; }},
};
static_assert(std::size(kFields) == kNicStatCount);

} // namespace

std::vector<const char *> nic_stat_names()
{
	std::vector<const char *> v;
	for (const Field &f : kFields)
		v.push_back(f.name);
	return v;
}

void nic_stat_values(const NicCounters &c, uint64_t out[kNicStatCount])
{
	for (size_t i = 0; i < kNicStatCount; i++)
		out[i] = kFields[i].get(c);
}

NicCounters Engine::snapshot_locked() const
{
	NicCounters c = ctr;
	c.port = port->counters();
	c.coll = coll->counters();
	c.seg_units = coll->seg_units();
	c.seg_in_use = coll->seg_in_use();
	c.seg_high_water = coll->seg_high_water();
	return c;
}

void Engine::publish_stats(uint64_t now, bool force)
{
	if (!stats_.is_open() || (!force && now - stats_at_ < util::kNsPerMs))
		return;
	stats_at_ = now;
	uint64_t v[kNicStatCount];
	nic_stat_values(snapshot_locked(), v);
	stats_.publish(v);
}

} // namespace ibv_coll::emu
