// The device model's configuration tables (IBV_COLL_EMU_*), one per component.
#include "nic/emu_config.h"

#include "reduce/reduce.h"
#include "util/log.h"

#include <cerrno>
#include <iterator>
#include <vector>

namespace ibv_coll::emu {
namespace {

using util::ConfigKind;
using util::ConfigVar;

// One table per component of the NIC, each registering itself; the
// transports' table is net/net_config.cc's, the reduce kernels'
// reduce/reduce.cc's (each read where it is defined).

// The engine thread.
enum { kPollUs, kAppPollUs, kNicCount };
const ConfigVar kNicVars[kNicCount] = {
	{"IBV_COLL_EMU_POLL_US", "2000",
	 "microseconds the engine thread keeps polling, yielding the processor between polls, "
	 "after its last piece of work before it blocks (0: block at once)",
	 ConfigKind::uint, 0, 1000000},
	{"IBV_COLL_EMU_APP_POLL_US", "1000",
	 "microseconds after an application thread polls a CQ during which the engine thread "
	 "leaves the port to the polling thread (0: never; arming a CQ ends it at once)",
	 ConfigKind::uint, 0, 1000000},
};
const util::ConfigRegistrar kNicReg({"emu nic (engine thread)", kNicVars}, 100);

// The RC transport.
enum { kRcWindow, kAckReq, kRcTimeout, kReadBurst, kRcOoo, kRcCount };
const ConfigVar kRcVars[kRcCount] = {
	{"IBV_COLL_EMU_RC_WINDOW", "256", "unacknowledged packets an RC QP may have in flight",
	 ConfigKind::uint, 1, 1u << 20},
	{"IBV_COLL_EMU_ACK_REQ_EVERY", "32",
	 "set AckReq on every Nth packet of a long message (and always on the last)",
	 ConfigKind::uint, 1, 1u << 20},
	{"IBV_COLL_EMU_RC_TIMEOUT", "14",
	 "local ACK timeout exponent (4.096 us * 2^n) used when a QP sets timeout 0",
	 ConfigKind::uint, 1, 31},
	{"IBV_COLL_EMU_READ_BURST", "64", "RDMA READ response packets a QP sends per engine pass",
	 ConfigKind::uint, 1, 1u << 20},
	{"IBV_COLL_EMU_RC_OOO", "256",
	 "requests an RC responder keeps when they arrive past a missing one (within this many "
	 "PSNs of it), so that the requester sends again only what was lost (0: drop them and "
	 "let the requester go back, as a standard RoCE responder does)",
	 ConfigKind::uint, 0, 1u << 16},
};
const util::ConfigRegistrar kRcReg({"emu rc (RC transport)", kRcVars}, 110);

// The collective engine.
enum {
	kSegUnits,
	kCollWindow,
	kCollRto,
	kCollProbe,
	kCollTimeout,
	kSwConfig,
	kCollXchg,
	kCollDepth,
	kPortMbps,
	kCollCount
};
const ConfigVar kCollVars[kCollCount] = {
	{"IBV_COLL_EMU_SEG_UNITS", "4096",
	 "Seg cache units (4 KiB each) in the NIC's collective engine", ConfigKind::uint, 1,
	 1u << 20},
	{"IBV_COLL_EMU_COLL_WINDOW", "64",
	 "data blocks a node keeps in flight per collective (at most the job's Seg units)",
	 ConfigKind::uint, 1, 1u << 16},
	{"IBV_COLL_EMU_COLL_RTO_US", "20000",
	 "least microseconds before a collective block without its result is sent again (the "
	 "timeout grows with the measured round trip)",
	 ConfigKind::uint, 100, 60000000},
	{"IBV_COLL_EMU_COLL_PROBE_US", "500",
	 "least microseconds a collective goes without a block completing before its oldest "
	 "blocks are probed for, ahead of their timeout (sent again round the ring, asked for "
	 "through a switch): twice the round trip when that is longer (0: no probes, the "
	 "timeout alone)",
	 ConfigKind::uint, 0, 60000000},
	{"IBV_COLL_EMU_COLL_TIMEOUT_MS", "10000",
	 "a collective that makes no progress this long fails with a timeout (jobs may set their own)",
	 ConfigKind::uint, 1, 3600000},
	{"IBV_COLL_EMU_SW_CONFIG_MS", "1000",
	 "how long a job waits for its switches to answer its configuration before topology AUTO "
	 "falls back to the ring (SWITCH and HIERARCHY fail with a timeout); once they answer, "
	 "the wait for the grant is the collective's timeout",
	 ConfigKind::uint, 1, 3600000},
	{"IBV_COLL_EMU_XCHG_BYTES", "16384",
	 "an allreduce or broadcast of at most this many bytes per rank, or a barrier, on a job "
	 "round the ring runs among the member NICs in about log2(nodes) steps instead (a pairwise "
	 "exchange, a binomial tree; 0: never); unset, 65536 for a job whose members all have one "
	 "address (one host); every member must have the same value",
	 ConfigKind::uint, 0, 65536},
	{"IBV_COLL_EMU_COLL_DEPTH", "4",
	 "collectives of one job that run at once, each with its own MID, when every one of them "
	 "runs as a pairwise exchange or a broadcast tree (IBV_COLL_EMU_XCHG_BYTES): later posts "
	 "start before earlier ones finish and complete after them, in MID order (1: one at a "
	 "time)",
	 ConfigKind::uint, 1, 16},
	{"IBV_COLL_EMU_PORT_MBPS", "0",
	 "the NIC's line rate in Mbit/s (all its ports', with planes): a collective's new blocks "
	 "through switches go no faster, so that a block sent again on a NAK waits behind at most "
	 "four packets (0: as fast as the window allows)",
	 ConfigKind::uint, 0, 100000000},
};
const util::ConfigRegistrar kCollReg({"emu coll (collective engine)", kCollVars}, 120);

// Congestion control (nic/cc.h): RC QPs and the ring's flows.
enum {
	kCc,
	kCcTarget,
	kCcHostTarget,
	kCcMaxMdf,
	kCcPace,
	kCnpInterval,
	kDcqcnAlpha,
	kDcqcnRecover,
	kDcqcnRecoverUnits,
	kDcqcnG,
	kCcCount
};
const ConfigVar kCcVars[kCcCount] = {
	{"IBV_COLL_EMU_CC", "1",
	 "congestion control of the ring's blocks and RC QPs: a window moved by round-trip delay, "
	 "loss and CNPs (0: the fixed windows IBV_COLL_EMU_COLL_WINDOW and IBV_COLL_EMU_RC_WINDOW)",
	 ConfigKind::uint, 0, 1},
	{"IBV_COLL_EMU_CC_TARGET_US", "1000",
	 "queueing delay the congestion window allows per queue a round trip crosses, in "
	 "microseconds: above the least fabric delay seen plus this, the window shrinks (the "
	 "time packets wait at endpoints is not counted: see IBV_COLL_EMU_CC_HOST_TARGET_US)",
	 ConfigKind::uint, 1, 1000000},
	{"IBV_COLL_EMU_CC_HOST_TARGET_US", "0",
	 "delay the endpoint window allows per host a round trip crosses, in microseconds: "
	 "when the time packets wait at the hosts they cross (their receive queues, their "
	 "processing) stays above this, the flow keeps fewer units in flight, down to an "
	 "eighth of its cap (a host's own slowness is not cured by sending less; 0: no "
	 "endpoint window)",
	 ConfigKind::uint, 0, 1000000},
	{"IBV_COLL_EMU_CC_MAX_MDF", "50",
	 "largest cut of the congestion window at once, percent (on loss, and on delay)",
	 ConfigKind::uint, 1, 99},
	{"IBV_COLL_EMU_CC_PACE", "0",
	 "1: spread each congestion window over half its round trip; 0: send as the "
	 "acknowledgements open the window",
	 ConfigKind::uint, 0, 1},
	{"IBV_COLL_EMU_CNP_INTERVAL_US", "50",
	 "a receiver of CE-marked packets returns at most one CNP per flow in this many "
	 "microseconds (0: one per CE-marked packet)",
	 ConfigKind::uint, 0, 1000000},
	{"IBV_COLL_EMU_DCQCN_ALPHA_US", "55",
	 "DCQCN: alpha decays by (1 - g) each this many microseconds without a CNP",
	 ConfigKind::uint, 1, 1000000},
	{"IBV_COLL_EMU_DCQCN_RECOVER_US", "300",
	 "DCQCN: after a CNP cut, a rate-increase step each this many microseconds",
	 ConfigKind::uint, 1, 10000000},
	{"IBV_COLL_EMU_DCQCN_RECOVER_UNITS", "64",
	 "DCQCN: ... and each this many packets (blocks) acknowledged (the byte counter; 0: off)",
	 ConfigKind::uint, 0, 1u << 20},
	{"IBV_COLL_EMU_DCQCN_G_SHIFT", "4", "DCQCN: alpha's gain g = 1/2^n per CNP",
	 ConfigKind::uint, 1, 16},
};
const util::ConfigRegistrar kCcReg({"emu cc (congestion control)", kCcVars}, 125);

} // namespace

std::span<const ConfigVar> emu_config_vars()
{
	static const std::vector<ConfigVar> all = [] {
		std::vector<ConfigVar> v;
		for (std::span<const ConfigVar> t :
		     {std::span<const ConfigVar>(kNicVars), std::span<const ConfigVar>(kRcVars),
		      std::span<const ConfigVar>(kCollVars), std::span<const ConfigVar>(kCcVars),
		      reduce_config_vars(), net_config_vars()})
			v.insert(v.end(), t.begin(), t.end());
		return v;
	}();
	return all;
}

int load_emu_config(EmuConfig *out)
{
	EmuConfig c;
	uint64_t v;
	int err;
	if ((err = util::config_uint(kNicVars[kPollUs], &v)))
		return err;
	c.poll_us = uint32_t(v);
	if ((err = util::config_uint(kNicVars[kAppPollUs], &v)))
		return err;
	c.app_poll_us = uint32_t(v);
	if ((err = util::config_uint(kRcVars[kRcWindow], &v)))
		return err;
	c.rc_window = uint32_t(v);
	if ((err = util::config_uint(kRcVars[kAckReq], &v)))
		return err;
	c.ack_req_every = uint32_t(v);
	if ((err = util::config_uint(kRcVars[kRcTimeout], &v)))
		return err;
	c.rc_timeout = uint8_t(v);
	if ((err = util::config_uint(kRcVars[kReadBurst], &v)))
		return err;
	c.read_burst = uint32_t(v);
	if ((err = util::config_uint(kRcVars[kRcOoo], &v)))
		return err;
	c.rc_ooo = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kSegUnits], &v)))
		return err;
	c.seg_units = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kCollWindow], &v)))
		return err;
	c.coll_window = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kCollRto], &v)))
		return err;
	c.coll_rto_us = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kCollProbe], &v)))
		return err;
	c.coll_probe_us = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kCollTimeout], &v)))
		return err;
	c.coll_timeout_ms = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kSwConfig], &v)))
		return err;
	c.sw_config_ms = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kCollXchg], &v)))
		return err;
	c.coll_xchg_bytes = uint32_t(v);
	c.coll_xchg_bytes_host = util::config_is_set(kCollVars[kCollXchg]) ? uint32_t(v) : 65536;
	if ((err = util::config_uint(kCollVars[kCollDepth], &v)))
		return err;
	c.coll_depth = uint32_t(v);
	if ((err = util::config_uint(kCollVars[kPortMbps], &v)))
		return err;
	c.port_rate_bps = v * 1000000;
	if ((err = util::config_uint(kCcVars[kCc], &v)))
		return err;
	c.cc.on = v != 0;
	if ((err = util::config_uint(kCcVars[kCcTarget], &v)))
		return err;
	c.cc.target_us = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kCcHostTarget], &v)))
		return err;
	c.cc.host_target_us = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kCcMaxMdf], &v)))
		return err;
	c.cc.max_mdf_pct = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kCcPace], &v)))
		return err;
	c.cc.pace = v != 0;
	if ((err = util::config_uint(kCcVars[kCnpInterval], &v)))
		return err;
	c.cnp_interval_us = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kDcqcnAlpha], &v)))
		return err;
	c.cc.alpha_us = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kDcqcnRecover], &v)))
		return err;
	c.cc.recover_us = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kDcqcnRecoverUnits], &v)))
		return err;
	c.cc.recover_units = uint32_t(v);
	if ((err = util::config_uint(kCcVars[kDcqcnG], &v)))
		return err;
	c.cc.dcqcn_g_shift = uint32_t(v);
	NetConfig net;
	if ((err = load_net_config(&net)))
		return err;
	c.sockbuf = net.sockbuf;
	c.gso = net.gso;
	c.impair = net.impair;
	*out = c;
	return 0;
}

} // namespace ibv_coll::emu
