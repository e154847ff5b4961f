// The protocol between ibv_coll_devd (the host's shared device) and its
// clients, on the channel of devd_sock.h.  A request is a Hdr and the op's
// struct; every request but a doorbell gets one reply, in order: a Hdr
// (same op and seq), an int32 errno and the op's reply struct.  Rings
// travel as memfds (SCM_RIGHTS) that both sides map; completion events as
// one eventfd per CQ that the daemon writes.  Both ends are built from one
// tree (the daemon is started from the installation the client runs), so
// structs go as they are in memory.
#pragma once

#include "coll/coll_job.h"
#include "nic/nic.h"

#include <cstdint>
#include <vector>

namespace ibv_coll::devd {

enum class Op : uint16_t {
	hello = 1,
	alloc_pd,
	dealloc_pd,
	reg_mr,
	reg_mr_keyed,
	dereg_mr,
	create_cq, // fds: ring memfd, event eventfd
	destroy_cq,
	create_qp, // fds: SQ memfd, RQ memfd
	modify_qp,
	query_qp,
	destroy_qp,
	sq_doorbell, // no reply
	rq_doorbell, // no reply
	arm_cq,
	counters,
};

constexpr uint32_t kProtoVersion = 2; // 2: a job carries its local range

struct Hdr {
	uint16_t op = 0;
	uint16_t flags = 0;
	uint32_t seq = 0;
	uint32_t len = 0; // bytes after the header
};

struct ReplyHdr {
	Hdr h;
	int32_t err = 0;
	uint32_t pad = 0;
};

struct HelloReq {
	uint32_t version = kProtoVersion;
};
struct HelloRep {
	uint32_t version = 0;
	uint32_t active_mtu = 0;
	uint32_t seg_units = 0, seg_unit_bytes = 0;
	uint16_t udp_port = 0;
};

struct PdMsg {
	uint32_t pdn = 0;
};

struct MrReq {
	uint32_t pdn = 0, access = 0;
	uint64_t addr = 0, len = 0;
	uint32_t key = 0; // reg_mr_keyed, dereg_mr
};
struct KeyRep {
	uint32_t key = 0;
};

struct CqReq {
	uint32_t slots = 0, stride = 0;
};
struct ObjRep {
	uint32_t id = 0;  // the client's handle of the object in the daemon
	uint32_t num = 0; // CQ or QP number
};

struct QpReq {
	uint32_t pdn = 0, send_cq = 0, recv_cq = 0;
	uint32_t sq_slots = 0, sq_stride = 0, rq_slots = 0, rq_stride = 0;
	uint8_t sig_all = 0, coll = 0;
};

// destroy_cq, destroy_qp, query_qp, doorbells, arm_cq (arg: solicited only).
struct ObjReq {
	uint32_t id = 0;
	uint32_t arg = 0;
};

// With kQpJob in mask, the job follows (pack_job); attr.job is not sent.
struct ModifyReq {
	uint32_t id = 0, mask = 0;
	emu::QpAttr attr;
};

// A job's configuration as bytes, and back: 0, EPROTO when the bytes are
// not one, EINVAL when its fields are out of range.
void pack_job(const emu::JobConfig &j, std::vector<uint8_t> *out);
int unpack_job(const uint8_t *p, size_t len, emu::JobConfig *j);

} // namespace ibv_coll::devd
