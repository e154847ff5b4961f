// ibv_coll_sim's description file (JSON) and its report tables.
#include "sim/sim.h"
#include "switch/switch.h"

#include "util/config.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <cstring>
#include <strings.h>

namespace ibv_coll::sim {

using nlohmann::json;

namespace {

struct Bad {
	std::string what;
};

[[noreturn]] void bad(const std::string &field, const std::string &why)
{
	throw Bad{field + ": " + why};
}

// "64K", "1M", "1G" (powers of 1024, as the IBV_COLL_* sizes are
// written, util::parse_size), "4096", and "B" or "iB" after the unit
// ("64KiB"): bytes.
uint64_t parse_bytes(const json &v, const std::string &field)
{
	if (v.is_number_unsigned())
		return v.get<uint64_t>();
	if (!v.is_string())
		bad(field, "a number of bytes or a string such as \"64K\"");
	const std::string s = v.get<std::string>();
	std::string t = s;
	for (const char *tail : {"ib", "b"}) {
		const size_t n = strlen(tail);
		if (t.size() > n + 1 && strcasecmp(t.c_str() + t.size() - n, tail) == 0 &&
		    strchr("kKmMgG", t[t.size() - n - 1])) {
			t.resize(t.size() - n);
			break;
		}
	}
	uint64_t x = 0;
	if (!util::parse_size(t.c_str(), &x))
		bad(field, "\"" + s + "\" is not a size (a number, or with K, M or G)");
	return x;
}

// "400mbit", "100gbit", "10kbit" or a number of bits per second.
uint64_t parse_rate(const json &v, const std::string &field)
{
	if (v.is_number_unsigned())
		return v.get<uint64_t>();
	if (!v.is_string())
		bad(field, "a number of bits per second or a string such as \"400mbit\"");
	const std::string s = v.get<std::string>();
	char *end = nullptr;
	const double n = strtod(s.c_str(), &end);
	if (end == s.c_str() || !(n > 0))
		bad(field, "\"" + s + "\" is not a rate");
	std::string u(end);
	for (char &c : u)
		c = char(tolower(c));
	double mul;
	if (u == "bit" || u == "bps" || u == "")
		mul = 1;
	else if (u == "kbit")
		mul = 1e3;
	else if (u == "mbit")
		mul = 1e6;
	else if (u == "gbit")
		mul = 1e9;
	else
		bad(field, "\"" + s + "\": unknown unit (bit, kbit, mbit, gbit)");
	if (n * mul > 1e13)
		bad(field, "\"" + s + "\" is beyond 10 Tbit/s");
	return uint64_t(std::llround(n * mul));
}

template <typename T>
T num(const json &o, const char *key, const std::string &at, T def, T lo, T hi)
{
	auto it = o.find(key);
	if (it == o.end())
		return def;
	const std::string f = at + key;
	if (!it->is_number())
		bad(f, "a number");
	const double d = it->get<double>();
	if (d < double(lo) || d > double(hi))
		bad(f, "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
	return T(d);
}

void only(const json &o, const std::string &at, std::initializer_list<const char *> keys)
{
	if (!o.is_object())
		bad(at.empty() ? "description" : at.substr(0, at.size() - 1), "an object");
	for (auto it = o.begin(); it != o.end(); ++it) {
		bool known = false;
		for (const char *k : keys)
			known |= it.key() == k;
		if (!known)
			bad(at + it.key(), "unknown field");
	}
}

LinkSpec parse_link(const json &o, const std::string &at, const LinkSpec &def)
{
	only(o, at, {"rate", "delay_us", "queue", "ecn"});
	LinkSpec l = def;
	if (o.contains("rate"))
		l.rate_bps = parse_rate(o["rate"], at + "rate");
	l.delay_ns = uint64_t(num<double>(o, "delay_us", at, double(def.delay_ns) / 1000, 0, 1e6) *
			      1000);
	if (o.contains("queue"))
		l.queue_bytes = parse_bytes(o["queue"], at + "queue");
	if (o.contains("ecn"))
		l.ecn_bytes = parse_bytes(o["ecn"], at + "ecn");
	return l;
}

std::string str(const json &o, const char *key, const std::string &at, const char *def)
{
	auto it = o.find(key);
	if (it == o.end())
		return def;
	if (!it->is_string())
		bad(at + key, "a string");
	return it->get<std::string>();
}

bool boolean(const json &o, const char *key, const std::string &at, bool def)
{
	auto it = o.find(key);
	if (it == o.end())
		return def;
	if (!it->is_boolean())
		bad(at + key, "true or false");
	return it->get<bool>();
}

// "0-1023,2048": hosts 0 to 1023 and 2048, in that order (as Slurm's
// node lists count them).
std::vector<uint32_t> host_ranges(const std::string &text, const std::string &at)
{
	std::vector<uint32_t> out;
	size_t i = 0;
	auto number = [&]() {
		const size_t from = i;
		uint64_t v = 0;
		while (i < text.size() && isdigit(uint8_t(text[i])) && v <= 65536)
			v = v * 10 + uint64_t(text[i++] - '0');
		if (i == from || v > 65536)
			bad(at, "\"" + text + "\": ranges of host indices, as \"0-1023,2048\"");
		return uint32_t(v);
	};
	while (true) {
		const uint32_t a = number();
		uint32_t b = a;
		if (i < text.size() && text[i] == '-') {
			i++;
			b = number();
		}
		if (b < a)
			bad(at, "\"" + text + "\": a range that ends before it starts");
		if (out.size() + (b - a) >= 65536)
			bad(at, "more than 65,536 hosts");
		for (uint32_t h = a; h <= b; h++)
			out.push_back(h);
		if (i == text.size())
			return out;
		if (text[i++] != ',')
			bad(at, "\"" + text + "\": ranges of host indices, as \"0-1023,2048\"");
	}
}

JobSpec parse_job(const json &o, const std::string &at)
{
	only(o, at,
	     {"name", "topology", "ranks_per_node", "collective", "root", "type", "op", "sizes",
	      "iters", "warmup", "start_us", "nodes", "seg_units", "window", "e2e_ack", "in_place",
	      "phantom", "depth", "late"});
	JobSpec j;
	j.name = str(o, "name", at, "");
	const std::string topo = str(o, "topology", at, "switch");
	if (topo == "ring")
		j.topology = SimTopology::ring;
	else if (topo == "switch")
		j.topology = SimTopology::sw;
	else if (topo == "auto")
		j.topology = SimTopology::autosel;
	else
		bad(at + "topology", "\"" + topo + "\": ring, switch or auto");
	const std::string coll = str(o, "collective", at, "allreduce");
	if (coll == "allreduce")
		j.coll = SimColl::allreduce;
	else if (coll == "broadcast")
		j.coll = SimColl::bcast;
	else if (coll == "barrier")
		j.coll = SimColl::barrier;
	else
		bad(at + "collective", "\"" + coll + "\": allreduce, broadcast or barrier");
	j.root = num<uint32_t>(o, "root", at, 0, 0, UINT32_MAX);
	if (o.contains("root") && j.coll != SimColl::bcast)
		bad(at + "root", "only a broadcast has a root");
	const std::string type = str(o, "type", at, "float");
	if (type == "float")
		j.type = SimType::f32;
	else if (type == "int32")
		j.type = SimType::int32;
	else
		bad(at + "type", "\"" + type + "\": float or int32");
	const std::string op = str(o, "op", at, "sum");
	if (op == "sum")
		j.op = SimOp::sum;
	else if (op == "max")
		j.op = SimOp::max;
	else if (op == "min")
		j.op = SimOp::min;
	else
		bad(at + "op", "\"" + op + "\": sum, max or min");
	j.ranks_per_node = num<uint32_t>(o, "ranks_per_node", at, 1, 1, 64);
	j.iters = num<uint32_t>(o, "iters", at, 1, 1, 1000000);
	j.warmup = num<uint32_t>(o, "warmup", at, 0, 0, 1000000);
	j.seg_units = num<uint32_t>(o, "seg_units", at, 256, 2, 1u << 16);
	j.window = num<uint32_t>(o, "window", at, 0, 0, 1u << 16);
	j.e2e_ack = boolean(o, "e2e_ack", at, false);
	j.in_place = boolean(o, "in_place", at, false);
	j.phantom = boolean(o, "phantom", at, false);
	if (j.phantom && j.in_place)
		bad(at + "phantom", "not with in_place (the ranks share one source)");
	j.depth = num<uint32_t>(o, "depth", at, 1, 1, 16);
	if (j.depth > 1 && (j.phantom || j.in_place))
		bad(at + "depth", "above 1 not with phantom or in_place (one buffer a rank)");
	j.start_ns = uint64_t(num<double>(o, "start_us", at, 0, 0, 1e9) * 1000);
	if (o.contains("late")) {
		const json &l = o["late"];
		const std::string la = at + "late.";
		if (!l.is_object())
			bad(at + "late", "{\"node\": N, \"us\": T}");
		only(l, la, {"node", "us"});
		j.late_node = num<uint32_t>(l, "node", la, 0, 0, 1u << 20);
		j.late_ns = uint64_t(num<double>(l, "us", la, 0, 0, 1e10) * 1000);
		if (j.late_ns && j.depth > 1)
			bad(at + "late", "not with depth above 1 (one message in flight)");
	}
	if (!o.contains("sizes") && j.coll != SimColl::barrier)
		bad(at + "sizes", "missing");
	if (!o.contains("sizes")) {
		j.sizes = {0}; // a barrier's
	} else {
		const json &sz = o["sizes"];
		if (!sz.is_array() || sz.empty())
			bad(at + "sizes", "a list of sizes such as [\"64K\", \"1M\"]");
		for (size_t i = 0; i < sz.size(); i++)
			j.sizes.push_back(
				parse_bytes(sz[i], at + "sizes[" + std::to_string(i) + "]"));
	}
	if (o.contains("nodes")) {
		const json &nd = o["nodes"];
		if (nd.is_string()) {
			j.nodes = host_ranges(nd.get<std::string>(), at + "nodes");
			return j;
		}
		if (!nd.is_array())
			bad(at + "nodes", "a list of host indices, or ranges as \"0-1023,2048\"");
		for (size_t i = 0; i < nd.size(); i++) {
			if (!nd[i].is_number_unsigned())
				bad(at + "nodes[" + std::to_string(i) + "]", "a host index");
			j.nodes.push_back(nd[i].get<uint32_t>());
		}
	}
	return j;
}

// fabric.stalls: hosts that stop for a while.
std::vector<FabricSpec::Stall> parse_stalls(const json &sl, uint32_t nodes)
{
	if (!sl.is_array())
		bad("fabric.stalls", "a list of {\"host\", \"at_us\", \"for_us\"}");
	std::vector<FabricSpec::Stall> out;
	for (size_t i = 0; i < sl.size(); i++) {
		const std::string at = "fabric.stalls[" + std::to_string(i) + "].";
		only(sl[i], at, {"host", "at_us", "for_us"});
		FabricSpec::Stall st;
		st.host = num<uint32_t>(sl[i], "host", at, 0, 0, nodes - 1);
		st.at_ns = uint64_t(num<double>(sl[i], "at_us", at, 0, 0, 1e9) * 1000);
		st.for_ns = uint64_t(num<double>(sl[i], "for_us", at, 0, 0, 1e9) * 1000);
		out.push_back(st);
	}
	return out;
}

} // namespace

bool parse_description(const std::string &text, FabricSpec *f, std::vector<JobSpec> *jobs,
		       uint64_t *seed, std::string *err)
{
	try {
		json d;
		try {
			d = json::parse(text);
		} catch (const json::parse_error &e) {
			bad("description", std::string("not JSON: ") + e.what());
		}
		only(d, "", {"seed", "fabric", "jobs"});
		*seed = num<uint64_t>(d, "seed", "", 1, 0, UINT32_MAX);
		if (!d.contains("fabric"))
			bad("fabric", "missing");
		const json &fo = d["fabric"];
		only(fo, "fabric.",
		     {"nodes",
		      "shape",
		      "nodes_per_leaf",
		      "leaves_per_pod",
		      "planes",
		      "link",
		      "uplink",
		      "corelink",
		      "loss",
		      "jitter_us",
		      "port_delay_us",
		      "port_jitter_us",
		      "cc",
		      "port_wait",
		      "mtu",
		      "switch_units",
		      "nic_units",
		      "switch_policy",
		      "switch_shares",
		      "switch_whole_grant",
		      "timeout_ms",
		      "rto_us",
		      "probe_us",
		      "xchg_bytes",
		      "coll_depth",
		      "stalls",
		      "trace_us"});
		FabricSpec fs;
		if (!fo.contains("nodes"))
			bad("fabric.nodes", "missing");
		fs.nodes = num<uint32_t>(fo, "nodes", "fabric.", 0, 2, 65536);
		const std::string shape = str(fo, "shape", "fabric.", "star");
		if (shape == "star")
			fs.shape = Shape::star;
		else if (shape == "tree2")
			fs.shape = Shape::tree2;
		else if (shape == "tree3")
			fs.shape = Shape::tree3;
		else
			bad("fabric.shape", "\"" + shape + "\": star, tree2 or tree3");
		fs.nodes_per_leaf = num<uint32_t>(fo, "nodes_per_leaf", "fabric.", 0, 0, 65536);
		fs.leaves_per_pod = num<uint32_t>(fo, "leaves_per_pod", "fabric.", 0, 0, 65536);
		fs.planes = num<uint32_t>(fo, "planes", "fabric.", 1, 1, 8);
		if (fo.contains("link"))
			fs.host = parse_link(fo["link"], "fabric.link.", fs.host);
		LinkSpec up = fs.host;
		up.rate_bps = 0; // host rate x hosts per leaf
		fs.up = fo.contains("uplink") ? parse_link(fo["uplink"], "fabric.uplink.", up) : up;
		LinkSpec core = fs.up;
		core.rate_bps = 0; // the uplinks' rate x leaves per pod
		fs.core = fo.contains("corelink")
				  ? parse_link(fo["corelink"], "fabric.corelink.", core)
				  : core;
		fs.loss = num<double>(fo, "loss", "fabric.", 0, 0, 0.99);
		fs.jitter_ns = uint64_t(num<double>(fo, "jitter_us", "fabric.", 0, 0, 1e6) * 1000);
		fs.port_delay_ns = uint64_t(num<double>(fo, "port_delay_us", "fabric.", 0, 0, 1e7) *
					    1000);
		fs.port_jitter_ns = uint64_t(
			num<double>(fo, "port_jitter_us", "fabric.", 0, 0, 1e7) * 1000);
		if (fs.port_jitter_ns > fs.port_delay_ns)
			bad("fabric.port_jitter_us", "larger than port_delay_us");
		fs.cc = boolean(fo, "cc", "fabric.", true);
		fs.port_wait = boolean(fo, "port_wait", "fabric.", true);
		fs.mtu = num<uint32_t>(fo, "mtu", "fabric.", 4096, 256, 4096);
		fs.switch_units = num<uint32_t>(fo, "switch_units", "fabric.", 4096, 1, 1u << 20);
		fs.nic_units = num<uint32_t>(fo, "nic_units", "fabric.", 2048, 64, 1u << 16);
		const std::string pol = str(fo, "switch_policy", "fabric.", "spatial");
		if (!emu::parse_policy(pol.c_str(), &fs.switch_policy))
			bad("fabric.switch_policy", "\"" + pol + "\": spatial, exclusive or tdm");
		fs.switch_shares = num<uint32_t>(fo, "switch_shares", "fabric.", 0, 0, 1u << 16);
		fs.switch_whole_grant = boolean(fo, "switch_whole_grant", "fabric.", false);
		fs.timeout_ms = num<uint32_t>(fo, "timeout_ms", "fabric.", 0, 0, 3600000);
		fs.rto_us = num<uint32_t>(fo, "rto_us", "fabric.", 0, 0, 10000000);
		fs.trace_ns = uint64_t(num<double>(fo, "trace_us", "fabric.", 0, 0, 1e9) * 1000);
		fs.probe_us = num<int64_t>(fo, "probe_us", "fabric.", -1, 0, 10000000);
		fs.xchg_bytes = num<uint32_t>(fo, "xchg_bytes", "fabric.", 16384, 0, 65536);
		fs.coll_depth = num<uint32_t>(fo, "coll_depth", "fabric.", 4, 1, 16);
		if (fo.contains("stalls"))
			fs.stalls = parse_stalls(fo["stalls"], fs.nodes);
		const std::string e = check_fabric(fs);
		if (!e.empty())
			throw Bad{e};
		if (!d.contains("jobs") || !d["jobs"].is_array() || d["jobs"].empty())
			bad("jobs", "a list of at least one job");
		std::vector<JobSpec> js;
		for (size_t i = 0; i < d["jobs"].size(); i++)
			js.push_back(parse_job(d["jobs"][i], "jobs[" + std::to_string(i) + "]."));
		*f = fs;
		*jobs = std::move(js);
		return true;
	} catch (const Bad &b) {
		*err = b.what;
		return false;
	}
}

static const char *topo_name(SimTopology t)
{
	return t == SimTopology::ring ? "ring" : t == SimTopology::sw ? "switch" : "auto";
}

// "allreduce float sum", "broadcast float from rank 3", "barrier".
static const char *shape_name(Shape s)
{
	return s == Shape::star ? "star" : s == Shape::tree2 ? "tree2" : "tree3";
}

static std::string coll_name(const JobSpec &s)
{
	const std::string type = s.type == SimType::f32 ? "float" : "int32";
	if (s.coll == SimColl::bcast)
		return "broadcast " + type + " from rank " + std::to_string(s.root);
	if (s.coll == SimColl::barrier)
		return "barrier";
	return "allreduce " + type +
	       (s.op == SimOp::sum   ? " sum"
		: s.op == SimOp::max ? " max"
				     : " min");
}

// Switches reported a line each, up to this many.
constexpr size_t kSwitchLines = 64;

void print_report(FILE *out, const FabricSpec &f, const SimReport &r)
{
	fprintf(out, "# fabric: %u hosts, %s", f.nodes, shape_name(f.shape));
	if (f.shape == Shape::tree2)
		fprintf(out, " (%u per leaf)", f.nodes_per_leaf);
	if (f.shape == Shape::tree3)
		fprintf(out, " (%u per leaf, %u leaves per pod)", f.nodes_per_leaf,
			f.leaves_per_pod);
	if (f.planes > 1)
		fprintf(out, ", %u planes", f.planes);
	fprintf(out, ", links %.3f Gbit/s, %.3f us, queue %llu B, loss %g, mtu %u",
		double(f.host.rate_bps) / 1e9, double(f.host.delay_ns) / 1e3,
		(unsigned long long)f.host.queue_bytes, f.loss, f.mtu);
	if (f.port_delay_ns)
		fprintf(out, ", each packet held %.3f +- %.3f us", double(f.port_delay_ns) / 1e3,
			double(f.port_jitter_ns) / 1e3);
	fprintf(out, "%s%s\n", f.port_wait ? "" : ", hosts' queues drop",
		f.cc ? "" : ", congestion control off");
	for (const JobResult &j : r.jobs) {
		const JobSpec &s = j.spec;
		fprintf(out,
			"# job %s: %s, %u rank(s) per host, %s%s, %u iteration(s) after %u warm-up%s\n",
			s.name.c_str(), topo_name(s.topology), s.ranks_per_node,
			coll_name(s).c_str(),
			s.phantom    ? ", phantom ranks"
			: s.in_place ? " in place"
				     : "",
			s.iters, s.warmup,
			s.depth > 1 ? (", " + std::to_string(s.depth) + " posted at once").c_str()
				    : "");
		const bool ring = s.topology == SimTopology::ring;
		fprintf(out,
			"# busbw/bound: against R%s%s; wire/S: bytes its first host put on its link%s per "
			"message / S\n",
			!ring && f.planes > 1 ? " x planes" : "",
			ring || s.coll == SimColl::bcast ? "" : " x 2(N-1)/N",
			f.planes > 1 ? "s" : "");
		fprintf(out, "%12s %12s %12s %10s %10s %12s %8s %7s %7s\n", "size(B)", "count",
			"time(us)", "algbw", "busbw", "busbw/bound", "wire/S", "#wrong", "#failed");
		for (const SizeResult &z : j.sizes) {
			if (!z.time_ns && !z.wrong && !z.failed) {
				fprintf(out, "%12llu %12llu %12s\n", (unsigned long long)z.bytes,
					(unsigned long long)z.count, "(not run)");
				continue;
			}
			fprintf(out,
				"%12llu %12llu %12.2f %10.3f %10.3f %12.3f %8.3f %7llu %7llu\n",
				(unsigned long long)z.bytes, (unsigned long long)z.count,
				double(z.time_ns) / 1e3, z.algbw, z.busbw,
				z.bound > 0 ? z.busbw / z.bound : 0, z.wire_s,
				(unsigned long long)z.wrong, (unsigned long long)z.failed);
		}
	}
	// Many switches (a large tree): one line for them all; each is in the
	// JSON report.
	const size_t ns = r.switch_peak.size();
	if (ns > kSwitchLines) {
		size_t busiest = 0;
		uint32_t peak = 0, collecting = 0;
		for (size_t i = 0; i < ns; i++) {
			peak = std::max(peak, r.switch_peak[i]);
			collecting = std::max(collecting, r.switch_use[i].peak_collecting);
			if (r.switch_use[i].load > r.switch_use[busiest].load)
				busiest = i;
		}
		fprintf(out,
			"# %zu switches: at most %u Seg units held blocks at once in one, %u waiting "
			"for partials; the busiest (switch %zu) took in %.1f %% of what its ports "
			"can (each in the JSON report)\n",
			ns, peak, collecting, busiest, 100 * r.switch_use[busiest].load);
	}
	for (size_t i = 0; ns <= kSwitchLines && i < ns; i++) {
		const SwitchUse &u = r.switch_use[i];
		fprintf(out,
			"# switch %zu: at most %u Seg units held blocks at once, %u waiting for "
			"partials; it took in %.1f %% of what its ports can, %llu ASKs, and sent "
			"%llu NAKs\n",
			i, r.switch_peak[i], u.peak_collecting, 100 * u.load,
			(unsigned long long)u.asks, (unsigned long long)u.naks);
		if (f.switch_policy == emu::Policy::tdm)
			fprintf(out,
				"# switch %zu: tdm: %llu message(s) granted the pool, %llu refused, "
				"at most %llu of one job in a row; the pool held %.6f s\n",
				i, (unsigned long long)u.adm_grants,
				(unsigned long long)u.adm_refusals,
				(unsigned long long)u.adm_streak, double(u.pool_us) / 1e6);
	}
	fprintf(out,
		"# virtual time %.6f s, %llu events, %llu packets on links, %llu dropped, %llu CE-marked\n",
		double(r.end_ns) / 1e9, (unsigned long long)r.events, (unsigned long long)r.packets,
		(unsigned long long)r.drops, (unsigned long long)r.marks);
	fprintf(out,
		"# hosts: %llu window cuts (%llu delay, %llu loss, %llu CNP), %llu sent again "
		"before the timeout, %llu NAKs waited out as reordering, %llu repeats needless; "
		"%llu blocks sent again, %llu NAKs, %llu probes, %llu packets refused\n",
		(unsigned long long)r.cc_cuts, (unsigned long long)r.cc_delay_cuts,
		(unsigned long long)r.cc_loss_cuts, (unsigned long long)r.cc_cnp_cuts,
		(unsigned long long)r.fast_retrans, (unsigned long long)r.reorder_waits,
		(unsigned long long)r.spurious_retrans, (unsigned long long)r.repeats,
		(unsigned long long)r.naks, (unsigned long long)r.probes,
		(unsigned long long)r.malformed);
	fprintf(out,
		"# hosts: sending held by a full window %llu time(s), %.3f us in all "
		"(the switch path)\n",
		(unsigned long long)r.win_holds, double(r.win_held_ns) / 1e3);
	if (r.stuck)
		fprintf(out, "# STUCK: jobs left unfinished\n%s", r.state.c_str());
}

std::string report_json(const FabricSpec &f, const SimReport &r)
{
	json d;
	d["fabric"] = {{"nodes", f.nodes},
		       {"shape", shape_name(f.shape)},
		       {"nodes_per_leaf", f.nodes_per_leaf},
		       {"leaves_per_pod", f.leaves_per_pod},
		       {"planes", f.planes},
		       {"rate_bps", f.host.rate_bps},
		       {"delay_ns", f.host.delay_ns},
		       {"queue_bytes", f.host.queue_bytes},
		       {"loss", f.loss},
		       {"port_delay_ns", f.port_delay_ns},
		       {"port_jitter_ns", f.port_jitter_ns},
		       {"cc", f.cc},
		       {"port_wait", f.port_wait},
		       {"mtu", f.mtu}};
	json jobs = json::array();
	for (const JobResult &j : r.jobs) {
		json sizes = json::array();
		for (const SizeResult &z : j.sizes)
			sizes.push_back({{"bytes", z.bytes},
					 {"count", z.count},
					 {"time_ns", z.time_ns},
					 {"algbw", z.algbw},
					 {"busbw", z.busbw},
					 {"bound", z.bound},
					 {"wire_s", z.wire_s},
					 {"wrong", z.wrong},
					 {"failed", z.failed}});
		jobs.push_back({{"name", j.spec.name},
				{"topology", topo_name(j.spec.topology)},
				{"collective", j.spec.coll == SimColl::bcast	 ? "broadcast"
					       : j.spec.coll == SimColl::barrier ? "barrier"
										 : "allreduce"},
				{"ranks_per_node", j.spec.ranks_per_node},
				{"phantom", j.spec.phantom},
				{"done", j.done},
				{"sizes", sizes}});
	}
	d["jobs"] = jobs;
	d["switch_peak_units"] = r.switch_peak;
	json use = json::array();
	for (const SwitchUse &u : r.switch_use)
		use.push_back({{"peak_collecting", u.peak_collecting},
			       {"load", u.load},
			       {"adm_grants", u.adm_grants},
			       {"adm_refusals", u.adm_refusals},
			       {"adm_streak", u.adm_streak},
			       {"pool_us", u.pool_us},
			       {"asks", u.asks},
			       {"naks", u.naks}});
	d["switch_use"] = use;
	if (!r.trace.empty()) {
		json t = json::array(), units = json::array(), cwnd = json::array();
		for (const TraceRow &row : r.trace) {
			t.push_back(row.t_ns);
			units.push_back(row.switch_units);
			cwnd.push_back(row.cwnd);
		}
		d["trace"] = {{"t_ns", t}, {"switch_units", units}, {"cwnd", cwnd}};
	}
	d["virtual_ns"] = r.end_ns;
	d["events"] = r.events;
	d["packets"] = r.packets;
	d["dropped"] = r.drops;
	d["ce_marked"] = r.marks;
	d["hosts"] = {{"window_cuts", r.cc_cuts},
		      {"delay_cuts", r.cc_delay_cuts},
		      {"loss_cuts", r.cc_loss_cuts},
		      {"cnp_cuts", r.cc_cnp_cuts},
		      {"fast_retrans", r.fast_retrans},
		      {"reorder_waits", r.reorder_waits},
		      {"spurious_retrans", r.spurious_retrans},
		      {"repeats", r.repeats},
		      {"naks", r.naks},
		      {"probes", r.probes},
		      {"refused", r.malformed},
		      {"window_holds", r.win_holds},
		      {"window_held_us", r.win_held_ns / 1000}};
	d["stuck"] = r.stuck;
	if (r.stuck)
		d["state"] = r.state;
	return d.dump(1, '\t') + "\n";
}

} // namespace ibv_coll::sim
