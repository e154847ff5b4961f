// RoCEv2 opcode table and the RNR timer encoding.
#include "wire/roce.h"

namespace ibv_coll::emu::wire {

uint16_t opcode_flags(uint8_t op)
{
	constexpr uint16_t S = kSend | kRequest | kHasPayload;
	constexpr uint16_t W = kWrite | kRequest | kHasPayload;
	constexpr uint16_t R = kReadResp | kHasPayload;
	switch (op) {
	case kSendFirst: return S | kFirst;
	case kSendMiddle: return S | kMiddle;
	case kSendLast: return S | kLast;
	case kSendLastImm: return S | kLast | kHasImm;
	case kSendOnly: return S | kOnly;
	case kSendOnlyImm: return S | kOnly | kHasImm;
	case kWriteFirst: return W | kFirst | kHasReth;
	case kWriteMiddle: return W | kMiddle;
	case kWriteLast: return W | kLast;
	case kWriteLastImm: return W | kLast | kHasImm;
	case kWriteOnly: return W | kOnly | kHasReth;
	case kWriteOnlyImm: return W | kOnly | kHasReth | kHasImm;
	case kReadRequest: return kRead | kRequest | kOnly | kHasReth;
	case kReadRespFirst: return R | kFirst | kHasAeth;
	case kReadRespMiddle: return R | kMiddle;
	case kReadRespLast: return R | kLast | kHasAeth;
	case kReadRespOnly: return R | kOnly | kHasAeth;
	case kAck: return kAckOp | kHasAeth;
	default: return 0;
	}
}

uint32_t rnr_timer_us(uint8_t code)
{
	// IBTA vol. 1 table 45: code -> milliseconds (0 is the longest).
	static const uint32_t us[32] = {
		655360, 10,    20,    30,    40,    60,	    80,	    120,    160,    240,    320,
		480,	640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
		20480,	30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
	};
	return us[code & 31];
}

} // namespace ibv_coll::emu::wire
