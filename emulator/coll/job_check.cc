// The one check of a job's shape, shared by everything that builds a
// JobConfig: the verbs providers (from ibv_coll_job_attr), ibv_coll_devd
// (from its wire form), the simulator and, last, the engine that installs
// it.  A job one of them refuses, all of them refuse, for the same reason.
#include "coll/coll_job.h"

#include "wire/swproto.h"

#include <cerrno>

namespace ibv_coll::emu {

// The switch path's bitmaps (wire/swproto.h): a member's bit is its index
// among its leaf's members, a leaf's bit at the spine its leaf index (with
// pods: its index among its pod's leaves), a spine's bit at the core its pod.
static int switch_bits(JobConfig &c, const char *&w)
{
	SwitchConfig &s = c.sw;
	const uint32_t n = c.nodes();
	const bool tree = s.leaves > 1, pods = s.pods > 1;
	const uint32_t mine = tree ? s.member_leaf[c.node] : 0;
	std::vector<uint8_t> count(s.leaves, 0);
	// Each leaf's bit at its spine.
	std::vector<uint8_t> up(s.leaves, 0);
	if (pods) {
		std::vector<uint8_t> in_pod(s.pods, 0);
		for (uint32_t l = 0; l < s.leaves; l++) {
			if (in_pod[s.leaf_pod[l]] == sw::kMaxLeaves)
				return w = "leaf_pod: at most 64 leaves under one spine (the CETH's bitmap)",
				       EINVAL;
			up[l] = in_pod[s.leaf_pod[l]]++;
		}
	}
	// Every node derives the same bits: a copy that shares them with the
	// configuration it came from keeps sharing (util/cow_vector.h).
	std::vector<uint8_t> bits(n, 0);
	s.top_bits = s.pod_bits = 0;
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t l = tree ? s.member_leaf[i] : 0;
		if (count[l] == sw::kMaxLeafMembers)
			return w = "nodes with a switch: at most 64 under one leaf (the CETH's bitmap)",
			       EINVAL;
		bits[i] = count[l];
		if (pods) {
			s.top_bits |= 1ull << s.leaf_pod[l];
			if (s.leaf_pod[l] == s.leaf_pod[mine])
				s.pod_bits |= 1ull << up[l];
		} else {
			s.top_bits |= 1ull << (tree ? l : i);
		}
		count[l]++;
	}
	if (!(s.member_bit == bits))
		s.member_bit = std::move(bits);
	s.leaf_bits = count[mine] == 64 ? ~0ull : (1ull << count[mine]) - 1;
	s.leaf_up = pods ? up[mine] : uint8_t(mine);
	return 0;
}

// A hierarchy's switches: leaves under spines, and with pods the spines
// under a core.
static int check_tree(const SwitchConfig &s, uint32_t n, const char *&w)
{
	if (s.leaves > 1 && s.member_leaf.size() != n)
		return w = "member_leaf: a leaf per member", EINVAL;
	for (uint16_t l : s.member_leaf)
		if (l >= s.leaves)
			return w = "member_leaf: a leaf the job does not have", EINVAL;
	if (s.pods <= 1) {
		if (s.leaves > sw::kMaxLeaves)
			return w = "switch leaves: 1 to 64 (with pods: 64 per pod)", EINVAL;
		if (s.leaves > 1 && s.spine.size() != s.planes)
			return w = "switch spines: one per plane", EINVAL;
		if (!s.core.empty() || !s.leaf_pod.empty())
			return w = "switch cores: only with pods", EINVAL;
		return 0;
	}
	if (s.pods > sw::kMaxLeaves || s.leaves < s.pods)
		return w = "switch pods: 2 to 64, each with a leaf", EINVAL;
	if (s.spine.size() != size_t(s.planes) * s.pods || s.core.size() != s.planes)
		return w = "switch spines and cores: a spine per plane and pod, a core per plane",
		       EINVAL;
	if (s.leaf_pod.size() != s.leaves)
		return w = "leaf_pod: a pod per leaf", EINVAL;
	for (uint8_t k : s.leaf_pod)
		if (k >= s.pods)
			return w = "leaf_pod: a pod the job does not have", EINVAL;
	if (s.inline_task)
		return w = "inline task: at most two levels (a three-level job configures)", EINVAL;
	return 0;
}

int check_job(JobConfig &c, const char **why)
{
	const char *dummy;
	const char *&w = why ? *why : dummy;
	const uint32_t n = c.nodes();
	if (!n || n > kMaxCollNodes)
		return w = "nodes: 1 to 65535", EINVAL;
	if (n > kMaxSwitchNodes && c.topology != Topology::ring && !c.sw.on)
		return w = "nodes without switches: 1 to 64 but round the ring", EINVAL;
	if (c.node >= n)
		return w = "node: not one of the members", EINVAL;
	if (!c.seg_count)
		return w = "seg_count: 0", EINVAL;
	if (uint64_t(c.seg_base) + c.seg_count > UINT32_MAX)
		return w = "seg_base + seg_count: beyond 2^32 units", EINVAL;
	if (c.block_len % 8)
		return w = "block_len: not a multiple of 8 (whole elements of every type)", EINVAL;
	if (uint8_t(c.topology) > uint8_t(Topology::autosel))
		return w = "topology: unknown", EINVAL;
	// The switch topologies need switches; a hierarchy needs leaves under
	// spines, a single switch one leaf per plane.
	if ((c.topology == Topology::sw || c.topology == Topology::hierarchy) && !c.sw.on)
		return w = "topology: switch or hierarchy without switches", EINVAL;
	if (c.sw.on) {
		const SwitchConfig &s = c.sw;
		if (!s.planes || s.planes > sw::kMaxPlanes)
			return w = "switch planes: 1 to 8", EINVAL;
		if (!s.leaves || !s.pods || s.leaves > sw::kMaxLeaves * sw::kMaxLeaves)
			return w = "switch leaves: 1 to 64 (with pods: 64 per pod)", EINVAL;
		if (s.leaf.size() != size_t(s.planes) * s.leaves)
			return w = "switch leaves: not planes x leaves addresses", EINVAL;
		if (int e = check_tree(s, n, w))
			return e;
		if (c.topology == Topology::sw && s.leaves != 1)
			return w = "topology: switch with more than one leaf (a hierarchy)", EINVAL;
		if (c.topology == Topology::hierarchy && s.leaves < 2)
			return w = "topology: hierarchy with one leaf", EINVAL;
		if (c.seg_count < 2)
			return w = "seg_count: the switch path needs 2 or more", EINVAL;
		if (int e = switch_bits(c, w))
			return e;
	}
	uint32_t rank = 0;
	for (uint32_t i = 0; i < n; i++) {
		const JobMember &m = c.members[i];
		if (!m.ranks || m.ranks > kMaxCollRanks)
			return w = "member ranks: 1 to 64 per node", EINVAL;
		if (m.first_rank != rank) // written only when it changes: copies share the list
			c.members.mut()[i].first_rank = rank;
		rank += c.members[i].ranks;
	}
	c.total_ranks = rank;
	const uint16_t node_ranks = c.members[c.node].ranks;
	if (c.local_count && uint32_t(c.local_first) + c.local_count > node_ranks)
		return w = "local ranks: beyond the node's", EINVAL;
	if (c.local_count == node_ranks)
		c.local_count = 0; // all of them, as without a range
	if (!c.local_count && c.local_first)
		return w = "local ranks: a first without a count", EINVAL;
	return 0;
}

} // namespace ibv_coll::emu
