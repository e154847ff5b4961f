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
// pods: its index among its pod's leaves), a spine's bit at the core its
// pod.  What is the same on every node goes into the shape.
static int switch_bits(const JobConfig &c, JobShape &sh, const char *&w)
{
	const SwitchConfig &s = c.sw;
	const uint32_t n = c.nodes();
	const bool tree = s.leaves > 1, pods = s.pods > 1;
	sh.leaf_count.assign(s.leaves, 0);
	if (pods) {
		sh.leaf_up.assign(s.leaves, 0);
		std::vector<uint8_t> in_pod(s.pods, 0);
		for (uint32_t l = 0; l < s.leaves; l++) {
			if (in_pod[s.leaf_pod[l]] == sw::kMaxLeaves)
				return w = "leaf_pod: at most 64 leaves under one spine (the CETH's bitmap)",
				       EINVAL;
			sh.leaf_up[l] = in_pod[s.leaf_pod[l]]++;
		}
		sh.pod_bits.assign(s.pods, 0);
	}
	// Every node derives the same bits: a copy that shares them with the
	// configuration it came from keeps sharing (util/cow_vector.h).
	std::vector<uint8_t> bits(n, 0);
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t l = tree ? s.member_leaf[i] : 0;
		if (sh.leaf_count[l] == sw::kMaxLeafMembers)
			return w = "nodes with a switch: at most 64 under one leaf (the CETH's bitmap)",
			       EINVAL;
		bits[i] = sh.leaf_count[l];
		if (pods) {
			sh.top_bits |= 1ull << s.leaf_pod[l];
			sh.pod_bits[s.leaf_pod[l]] |= 1ull << sh.leaf_up[l];
		} else {
			sh.top_bits |= 1ull << (tree ? l : i);
		}
		sh.leaf_count[l]++;
	}
	if (s.member_bit == bits)
		sh.member_bit = s.member_bit;
	else
		sh.member_bit = std::move(bits);
	return 0;
}

// This node's bits, from the shape.
static void node_bits(JobConfig &c, const JobShape &sh)
{
	SwitchConfig &s = c.sw;
	const bool tree = s.leaves > 1, pods = s.pods > 1;
	const uint32_t mine = tree ? s.member_leaf[c.node] : 0;
	if (!s.member_bit.shares(sh.member_bit))
		s.member_bit = sh.member_bit;
	s.top_bits = sh.top_bits;
	s.pod_bits = pods ? sh.pod_bits[s.leaf_pod[mine]] : 0;
	const uint8_t count = sh.leaf_count[mine];
	s.leaf_bits = count == 64 ? ~0ull : (1ull << count) - 1;
	s.leaf_up = pods ? sh.leaf_up[mine] : uint8_t(mine);
}

// A hierarchy's switches: leaves under spines, and with pods the spines
// under a core.
static int check_tree(const SwitchConfig &s, uint32_t n, bool known, const char *&w)
{
	if (s.leaves > 1 && s.member_leaf.size() != n)
		return w = "member_leaf: a leaf per member", EINVAL;
	for (size_t i = 0; !known && i < s.member_leaf.size(); i++)
		if (s.member_leaf[i] >= s.leaves)
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
	for (size_t l = 0; !known && l < s.leaf_pod.size(); l++)
		if (s.leaf_pod[l] >= s.pods)
			return w = "leaf_pod: a pod the job does not have", EINVAL;
	if (s.inline_task)
		return w = "inline task: at most two levels (a three-level job configures)", EINVAL;
	return 0;
}

// Whether the configuration carries the shape of the very lists it holds.
static bool shape_known(const JobConfig &c)
{
	const JobShape *sh = c.shape.get();
	return sh && c.members.is(sh->members) && sh->sw == c.sw.on &&
	       (!sh->sw ||
		(c.sw.member_leaf.is(sh->member_leaf) && c.sw.leaf_pod.is(sh->leaf_pod) &&
		 sh->leaves == c.sw.leaves && sh->pods == c.sw.pods));
}

// The walk of the member list: ranks, first ranks, address families.
static int walk_members(JobConfig &c, JobShape &sh, const char *&w)
{
	uint32_t rank = 0;
	bool v4 = false, v6 = false;
	for (uint32_t i = 0; i < c.nodes(); i++) {
		const JobMember &m = c.members[i];
		if (!m.ranks || m.ranks > kMaxCollRanks)
			return w = "member ranks: 1 to 64 per node", EINVAL;
		if (m.first_rank != rank) // written only when it changes: copies share the list
			c.members.mut()[i].first_rank = rank;
		rank += c.members[i].ranks;
		(c.members[i].ep.ip.v4() ? v4 : v6) = true;
	}
	sh.total_ranks = rank;
	sh.family = v4 && v6 ? 0 : v6 ? 6 : 4;
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
	const bool known = shape_known(c);
	std::shared_ptr<JobShape> fresh;
	if (!known) {
		fresh = std::make_shared<JobShape>();
		fresh->sw = c.sw.on;
		fresh->leaves = c.sw.leaves;
		fresh->pods = c.sw.pods;
	}
	if (c.sw.on) {
		const SwitchConfig &s = c.sw;
		if (!s.planes || s.planes > sw::kMaxPlanes)
			return w = "switch planes: 1 to 8", EINVAL;
		if (!s.leaves || !s.pods || s.leaves > sw::kMaxLeaves * sw::kMaxLeaves)
			return w = "switch leaves: 1 to 64 (with pods: 64 per pod)", EINVAL;
		if (s.leaf.size() != size_t(s.planes) * s.leaves)
			return w = "switch leaves: not planes x leaves addresses", EINVAL;
		if (int e = check_tree(s, n, known, w))
			return e;
		if (c.topology == Topology::sw && s.leaves != 1)
			return w = "topology: switch with more than one leaf (a hierarchy)", EINVAL;
		if (c.topology == Topology::hierarchy && s.leaves < 2)
			return w = "topology: hierarchy with one leaf", EINVAL;
		if (c.seg_count < 2)
			return w = "seg_count: the switch path needs 2 or more", EINVAL;
		if (!known)
			if (int e = switch_bits(c, *fresh, w))
				return e;
	}
	if (!known) {
		if (int e = walk_members(c, *fresh, w))
			return e;
		fresh->layout = new_layout_cache();
		fresh->members = c.members.pin();
		fresh->member_leaf = c.sw.member_leaf.pin();
		fresh->leaf_pod = c.sw.leaf_pod.pin();
		c.shape = std::move(fresh);
	}
	const JobShape &sh = *c.shape;
	if (c.sw.on)
		node_bits(c, sh);
	c.total_ranks = sh.total_ranks;
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
