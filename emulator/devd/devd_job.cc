// A collective job's configuration on the devd channel: the fixed fields,
// then the members and the switches' endpoints, each vector preceded by
// its length, so that the daemon can check every length against the
// bytes that came.
#include "devd/devd_proto.h"

#include "util/log.h"

#include <cstring>

namespace ibv_coll::devd {

namespace {

struct JobFixed {
	uint32_t jid = 0, seg_base = 0, seg_count = 0, block_len = 0, timeout_ms = 0,
		 total_ranks = 0;
	uint64_t key = 0;
	uint16_t node = 0, local_first = 0, local_count = 0;
	uint8_t topology = 0;
	uint8_t sw_on = 0, sw_inline_task = 0, sw_e2e_ack = 0;
	uint32_t sw_planes = 0, sw_leaves = 0, sw_pods = 0, sw_window = 0;
	uint32_t n_members = 0, n_leaf = 0, n_spine = 0, n_core = 0, n_member_leaf = 0,
		 n_leaf_pod = 0;
};

// n Ts at *at, which moves past them (the buffer is sized beforehand).
template <class T> void put(uint8_t *&at, const T *p, size_t n)
{
	if (n) // an empty vector's data() may be null
		memcpy(at, p, n * sizeof(T));
	at += n * sizeof(T);
}

template <class T> bool take(const uint8_t *&p, const uint8_t *end, std::vector<T> *v, size_t n)
{
	if (size_t(end - p) / sizeof(T) < n)
		return false;
	v->resize(n);
	if (n) // an empty vector's data() may be null
		memcpy(v->data(), p, n * sizeof(T));
	p += n * sizeof(T);
	return true;
}

template <class T> bool take(const uint8_t *&p, const uint8_t *end, util::CowVector<T> *v, size_t n)
{
	return take(p, end, &v->mut(), n);
}

} // namespace

void pack_job(const emu::JobConfig &j, std::vector<uint8_t> *out)
{
	JobFixed f;
	f.jid = j.jid;
	f.seg_base = j.seg_base;
	f.seg_count = j.seg_count;
	f.block_len = j.block_len;
	f.timeout_ms = j.timeout_ms;
	f.total_ranks = j.total_ranks;
	f.key = j.key;
	f.node = j.node;
	f.local_first = j.local_first;
	f.local_count = j.local_count;
	f.topology = uint8_t(j.topology);
	f.sw_on = j.sw.on;
	f.sw_inline_task = j.sw.inline_task;
	f.sw_e2e_ack = j.sw.e2e_ack;
	f.sw_planes = j.sw.planes;
	f.sw_leaves = j.sw.leaves;
	f.sw_pods = j.sw.pods;
	f.sw_window = j.sw.window;
	f.n_members = uint32_t(j.members.size());
	f.n_leaf = uint32_t(j.sw.leaf.size());
	f.n_spine = uint32_t(j.sw.spine.size());
	f.n_core = uint32_t(j.sw.core.size());
	f.n_member_leaf = uint32_t(j.sw.member_leaf.size());
	f.n_leaf_pod = uint32_t(j.sw.leaf_pod.size());
	out->assign(sizeof(f) + j.members.size() * sizeof(j.members[0]) +
			    (j.sw.leaf.size() + j.sw.spine.size() + j.sw.core.size()) *
				    sizeof(emu::Endpoint) +
			    j.sw.member_leaf.size() * sizeof(j.sw.member_leaf[0]) +
			    j.sw.leaf_pod.size(),
		    0);
	uint8_t *at = out->data();
	put(at, &f, 1);
	put(at, j.members.data(), j.members.size());
	put(at, j.sw.leaf.data(), j.sw.leaf.size());
	put(at, j.sw.spine.data(), j.sw.spine.size());
	put(at, j.sw.core.data(), j.sw.core.size());
	put(at, j.sw.member_leaf.data(), j.sw.member_leaf.size());
	put(at, j.sw.leaf_pod.data(), j.sw.leaf_pod.size());
}

int unpack_job(const uint8_t *p, size_t len, emu::JobConfig *j)
{
	const uint8_t *end = p + len;
	JobFixed f;
	if (len < sizeof(f))
		return EPROTO;
	memcpy(&f, p, sizeof(f));
	p += sizeof(f);
	if (f.n_members > emu::kMaxCollNodes || f.topology > uint8_t(emu::Topology::autosel))
		return EINVAL;
	*j = emu::JobConfig{};
	j->jid = f.jid;
	j->seg_base = f.seg_base;
	j->seg_count = f.seg_count;
	j->block_len = f.block_len;
	j->timeout_ms = f.timeout_ms;
	j->total_ranks = f.total_ranks;
	j->key = f.key;
	j->node = f.node;
	j->local_first = f.local_first;
	j->local_count = f.local_count;
	j->topology = emu::Topology(f.topology);
	j->sw.on = f.sw_on;
	j->sw.inline_task = f.sw_inline_task;
	j->sw.e2e_ack = f.sw_e2e_ack;
	j->sw.planes = f.sw_planes;
	j->sw.leaves = f.sw_leaves;
	j->sw.pods = f.sw_pods;
	j->sw.window = f.sw_window;
	if (!take(p, end, &j->members, f.n_members) || !take(p, end, &j->sw.leaf, f.n_leaf) ||
	    !take(p, end, &j->sw.spine, f.n_spine) || !take(p, end, &j->sw.core, f.n_core) ||
	    !take(p, end, &j->sw.member_leaf, f.n_member_leaf) ||
	    !take(p, end, &j->sw.leaf_pod, f.n_leaf_pod) || p != end)
		return EPROTO;
	// The shape as every job's is checked (the engine checks it again
	// when it installs the job, with what depends on the device).
	const char *why = nullptr;
	if (emu::check_job(*j, &why)) {
		IBVC_WARN("devd", "job {} from a client refused: {}", j->jid, why);
		return EINVAL;
	}
	return 0;
}

} // namespace ibv_coll::devd
