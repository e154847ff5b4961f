// The switch's counters: their sum, their names, the text and JSON output
// and the answer to STATS (wire/swproto.h) for ibv_coll_stat(8), in a
// reply no longer than the request.
#include "switch/switch.h"
#include "switch/switch_impl.h"

#include "util/log.h"
#include "wire/coll_codec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace ibv_coll::emu {

using namespace wire;

void Switch::on_stats(const In &p)
{
	// Room for the name at least; the reply's headers are the request's.
	if (p.paylen < sw::kStatsNameBytes) {
		gone().drop_malformed++;
		return;
	}
	gone().delivered++;
	const std::vector<NamedCounter> recs = stat_records_locked();
	const size_t fit = (p.paylen - sw::kStatsNameBytes) / sw::kStatsRecordBytes;
	const size_t first = std::min<size_t>(p.h.sid, recs.size());
	const size_t n = std::min(fit, recs.size() - first);
	const uint32_t paylen = uint32_t(sw::kStatsNameBytes + n * sw::kStatsRecordBytes);

	uint8_t *buf = tx().tx_buf();
	Ceth h;
	h.src_node = sw::kNodeSwitch;
	h.mid = p.h.mid;
	h.sid = p.h.sid;
	h.seg = uint16_t(std::min<size_t>(recs.size(), UINT16_MAX));
	// dqpn 0: an asker is a UDP socket, not a QP; the PSN is its tag.
	const size_t hdr = coll_encode(buf, kCollStatsReply, 0, p.h.mid, h, nullptr, 0, paylen);
	uint8_t *out = buf + hdr;
	memset(out, 0, paylen);
	memcpy(out, p_.name.data(), std::min(p_.name.size(), sw::kStatsNameBytes - 1));
	for (size_t i = 0; i < n; i++) {
		uint8_t *r = out + sw::kStatsNameBytes + i * sw::kStatsRecordBytes;
		const char *key = recs[first + i].first;
		memcpy(r, key, std::min(strlen(key), sw::kStatsKeyBytes - 1));
		store_be64(r + sw::kStatsKeyBytes, recs[first + i].second);
	}
	// Whole records only, so the length is a multiple of 4: no pad.
	const UdpEndpoints ep = udp_endpoints(p.dst, tx().port(), p.src);
	tx().tx_commit(roce_seal(ep, buf, hdr, paylen), p.src, p.dst);
	IBVC_DEBUG("switch", "{}: stats to {}:{}, records {}..{} of {}", p_.name, p.src.ip.str(),
		   p.src.port, first, first + n, recs.size());
}

void SwitchCounters::add(const SwitchCounters &o)
{
	rx_packets += o.rx_packets;
	rx_bytes += o.rx_bytes;
	tx_packets += o.tx_packets;
	tx_bytes += o.tx_bytes;
	data += o.data;
	reductions += o.reductions;
	results += o.results;
	duplicates += o.duplicates;
	retrans_answered += o.retrans_answered;
	resent_up += o.resent_up;
	asks += o.asks;
	naks += o.naks;
	tail_naks += o.tail_naks;
	results_again += o.results_again;
	configs += o.configs;
	grants += o.grants;
	denials += o.denials;
	releases += o.releases;
	drop_icrc += o.drop_icrc;
	drop_malformed += o.drop_malformed;
	drop_key += o.drop_key;
	drop_job += o.drop_job;
	drop_node += o.drop_node;
	drop_block += o.drop_block;
	drop_stale += o.drop_stale;
	drop_busy += o.drop_busy;
	drop_incarnation += o.drop_incarnation;
	incarnations += o.incarnations;
	delivered += o.delivered;
	drop_empty += o.drop_empty;
	drop_short += o.drop_short;
	drop_kind += o.drop_kind;
	adm_grants += o.adm_grants;
	adm_busy += o.adm_busy;
	adm_scored += o.adm_scored;
	adm_refused += o.adm_refused;
	pool_us += o.pool_us;
	adm_streak = std::max(adm_streak, o.adm_streak);
}

// With several workers, a reader from outside their passes holds the
// switch's lock: the counters it sums are the workers' own, written under
// the shared lock.
namespace {
struct ReadLock {
	ReadLock(RwLock &l, bool on) : l_(on ? &l : nullptr)
	{
		if (l_)
			l_->lock();
	}
	~ReadLock()
	{
		if (l_)
			l_->unlock();
	}
	ReadLock(const ReadLock &) = delete;
	ReadLock &operator=(const ReadLock &) = delete;
	RwLock *l_;
};
} // namespace

SwitchCounters Switch::totals() const
{
	ReadLock l(mu_, multi());
	return totals_locked();
}

SwitchCounters Switch::totals_locked() const
{
	SwitchCounters t;
	for (const auto &w : w_)
		t.add(w->gone);
	for (const auto &kv : jobs_)
		t.add(job_total(kv.second));
	t.rx_packets = t.rx_bytes = t.tx_packets = t.tx_bytes = 0;
	for (const auto &w : w_) {
		const PortCounters &pc = w->port->counters();
		t.rx_packets += pc.rx_packets;
		t.rx_bytes += pc.rx_bytes;
		t.tx_packets += pc.tx_packets;
		t.tx_bytes += pc.tx_bytes;
	}
	return t;
}

std::vector<std::pair<uint64_t, uint64_t>> Switch::worker_packets() const
{
	ReadLock l(mu_, multi());
	std::vector<std::pair<uint64_t, uint64_t>> v;
	for (const auto &w : w_)
		v.emplace_back(w->port->counters().rx_packets, w->port->counters().tx_packets);
	return v;
}

bool Switch::job_counters(uint32_t jid, SwitchCounters *out) const
{
	ReadLock l(mu_, multi());
	auto it = jobs_.find(jid);
	if (it == jobs_.end())
		return false;
	*out = job_total(it->second);
	return true;
}

bool Switch::job_view(uint32_t jid, SwitchJobView *out) const
{
	ReadLock l(mu_, multi());
	auto it = jobs_.find(jid);
	if (it == jobs_.end())
		return false;
	const Job &j = it->second;
	out->inc = j.inc;
	out->key = j.key;
	out->members.clear();
	for (const Child &c : j.children)
		out->members.push_back({c.ep, c.qpn, c.cover});
	return true;
}

// The units taken and not yet done (kUnitDone: SegPool::settle where it
// is set), counted by the pool as they change, not by a walk over it:
// ibv_coll_sim asks after every pass of every switch.
uint32_t Switch::units_collecting() const
{
	return pool_.collecting();
}

uint32_t Switch::units_in_use() const
{
	uint32_t n = 0;
	for (uint8_t b : range_used_)
		n += b;
	if (hold_.on)
		n += p_.units; // tdm: the whole pool, lent
	return n;
}

std::vector<NamedCounter> named_counters(const SwitchCounters &c)
{
	return {
		{"rx_packets", c.rx_packets},
		{"rx_bytes", c.rx_bytes},
		{"tx_packets", c.tx_packets},
		{"tx_bytes", c.tx_bytes},
		{"data", c.data},
		{"reductions", c.reductions},
		{"results", c.results},
		{"duplicates", c.duplicates},
		{"retrans_answered", c.retrans_answered},
		{"resent_up", c.resent_up},
		{"asks", c.asks},
		{"naks", c.naks},
		{"tail_naks", c.tail_naks},
		{"results_again", c.results_again},
		{"configs", c.configs},
		{"grants", c.grants},
		{"denials", c.denials},
		{"releases", c.releases},
		{"drop_icrc", c.drop_icrc},
		{"drop_malformed", c.drop_malformed},
		{"drop_key", c.drop_key},
		{"drop_job", c.drop_job},
		{"drop_node", c.drop_node},
		{"drop_block", c.drop_block},
		{"drop_stale", c.drop_stale},
		{"drop_busy", c.drop_busy},
		{"drop_incarnation", c.drop_incarnation},
		{"incarnations", c.incarnations},
		{"delivered", c.delivered},
		{"drop_empty", c.drop_empty},
		{"drop_short", c.drop_short},
		{"drop_kind", c.drop_kind},
		{"adm_grants", c.adm_grants},
		{"adm_busy", c.adm_busy},
		{"adm_scored", c.adm_scored},
		{"adm_refused", c.adm_refused},
		{"pool_us", c.pool_us},
		{"adm_streak", c.adm_streak},
	};
}

std::vector<NamedCounter> Switch::stat_records() const
{
	ReadLock l(mu_, multi());
	return stat_records_locked();
}

std::vector<NamedCounter> Switch::stat_records_locked() const
{
	std::vector<NamedCounter> v = named_counters(totals_locked());
	v.emplace_back("units", p_.units);
	v.emplace_back("units_in_use", units_in_use());
	v.emplace_back("jobs", jobs_.size());
	return v;
}

namespace {

void print_ctr(FILE *f, const SwitchCounters &c)
{
	bool first = true;
	for (const auto &kv : named_counters(c)) {
		fprintf(f, "%s%s %llu", first ? "" : ", ", kv.first,
			static_cast<unsigned long long>(kv.second));
		first = false;
	}
}

nlohmann::ordered_json json_ctr(const SwitchCounters &c)
{
	nlohmann::ordered_json o = nlohmann::ordered_json::object();
	for (const auto &kv : named_counters(c))
		o[kv.first] = kv.second;
	return o;
}

} // namespace

// What one receive call brought, on the calls that brought anything (of
// UdpPort::kRxMsgs datagrams at most; a GRO datagram holds several
// packets), and what one send call carried.
void Switch::print_batches(FILE *f) const
{
	uint64_t calls = 0, dgrams = 0, rx = 0, tx_calls = 0, tx = 0;
	for (const auto &w : w_) {
		const PortCounters &pc = w->port->counters();
		calls += pc.rx_busy_syscalls;
		dgrams += pc.rx_datagrams;
		rx += pc.rx_packets;
		tx_calls += pc.tx_syscalls;
		tx += pc.tx_packets;
	}
	auto per = [](uint64_t a, uint64_t b) { return b ? double(a) / double(b) : 0.0; };
	fprintf(f,
		"  per system call: in %.1f packets (%.1f datagrams) in %llu calls, out %.1f "
		"packets in %llu calls\n",
		per(rx, calls), per(dgrams, calls), static_cast<unsigned long long>(calls),
		per(tx, tx_calls), static_cast<unsigned long long>(tx_calls));
}

void Switch::print_stats(FILE *f, bool json) const
{
	ReadLock l(mu_, multi());
	SwitchCounters t = totals_locked();
	if (json) {
		// Through a JSON library: a name may hold quotes, backslashes or
		// bytes that are not UTF-8 (replaced, not rejected).
		nlohmann::ordered_json o;
		o["switch"] = p_.name;
		o["port"] = port();
		o["workers"] = nlohmann::ordered_json::array();
		for (const auto &w : w_) {
			const PortCounters &pc = w->port->counters();
			o["workers"].push_back({{"rx_packets", pc.rx_packets},
						{"tx_packets", pc.tx_packets},
						{"rx_calls", pc.rx_busy_syscalls},
						{"rx_datagrams", pc.rx_datagrams},
						{"tx_calls", pc.tx_syscalls}});
		}
		o["units"] = p_.units;
		o["units_in_use"] = units_in_use();
		o["total"] = json_ctr(t);
		o["jobs"] = nlohmann::ordered_json::array();
		for (const auto &kv : jobs_) {
			nlohmann::ordered_json j;
			j["jid"] = kv.first;
			j["units"] = kv.second.granted;
			j["children"] = kv.second.children.size();
			j.update(json_ctr(job_total(kv.second)));
			o["jobs"].push_back(std::move(j));
		}
		fprintf(f, "%s\n",
			o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
	} else {
		fprintf(f, "%s: port %u, workers %zu, Seg units %u, in use %u\n", p_.name.c_str(),
			port(), w_.size(), p_.units, units_in_use());
		if (w_.size() > 1) {
			fprintf(f, "  packets per worker (in/out):");
			for (const auto &w : w_)
				fprintf(f, " %llu/%llu",
					static_cast<unsigned long long>(
						w->port->counters().rx_packets),
					static_cast<unsigned long long>(
						w->port->counters().tx_packets));
			fprintf(f, "\n");
		}
		print_batches(f);
		fprintf(f, "  total: ");
		print_ctr(f, t);
		fprintf(f, "\n");
		for (const auto &kv : jobs_) {
			fprintf(f, "  job %u (%u units, %zu children): ", kv.first,
				kv.second.granted, kv.second.children.size());
			print_ctr(f, job_total(kv.second));
			fprintf(f, "\n");
		}
	}
	fflush(f);
}

} // namespace ibv_coll::emu
