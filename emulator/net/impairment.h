// The test-only impairment settings of a transport's transmit path, shared
// by the NIC's port and the switch's.
#pragma once

#include <cstdint>
#include <string>

namespace ibv_coll::emu {

// Test-only impairment of the transmit path, from IBV_COLL_EMU_IMPAIR
// ("drop=0.05,dup=0.01,reorder=0.01,delay=5ms,jitter=1ms,ce=0.1,seed=7",
// or a burst of them: "dup=0.2,reorder=0.2,after=3s,for=500ms").
// The network this machine's kernel can build (tbf/htb queues) has no
// delay, random loss or ECN marking, so those come from here.
struct Impairment {
	double drop = 0, dup = 0, reorder = 0;
	double ce = 0;		// fraction of packets sent with CE instead of ECT(0)
	uint64_t delay_ns = 0;	// one-way delay added to every packet
	uint64_t jitter_ns = 0; // uniform +-jitter on it, order kept
	uint64_t seed = 1;
	// A burst: drop, dup, reorder and ce apply only from after_ns for
	// for_ns (0: for good) after the port opened; delay and jitter always.
	uint64_t after_ns = 0, for_ns = 0;
	bool active() const
	{
		return drop > 0 || dup > 0 || reorder > 0 || ce > 0 || delay_ns || jitter_ns;
	}
	// Whether the random impairments apply at t ns after the port opened.
	bool in_burst(uint64_t t) const
	{
		return t >= after_ns && (!for_ns || t - after_ns < for_ns);
	}
	// 0, or EINVAL with *why (if given) naming the offending item.
	static int parse(const std::string &spec, Impairment *out, std::string *why = nullptr);
	std::string str() const;
};

} // namespace ibv_coll::emu
