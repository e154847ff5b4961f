// IBV_COLL_EMU_IMPAIR's syntax: parsing and printing the settings.
#include "net/impairment.h"

#include "util/config.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace ibv_coll::emu {

namespace {

// "5ms", "200us", "0.01s", "0": a duration in nanoseconds.  A bare number
// other than 0 is refused: netem users write units, and a guess would be
// off by a factor of a thousand.
bool parse_duration(const std::string &v, uint64_t *ns)
{
	char *end = nullptr;
	double x = strtod(v.c_str(), &end);
	if (end == v.c_str() || !(x >= 0) || x > 3600)
		return false;
	std::string unit(end);
	double scale;
	if (unit == "s")
		scale = 1e9;
	else if (unit == "ms")
		scale = 1e6;
	else if (unit == "us")
		scale = 1e3;
	else if (unit == "ns")
		scale = 1;
	else if (unit.empty() && x == 0)
		scale = 0;
	else
		return false;
	*ns = uint64_t(x * scale + 0.5);
	return true;
}

} // namespace

int Impairment::parse(const std::string &spec, Impairment *out, std::string *why)
{
	Impairment r;
	std::stringstream ss(spec);
	std::string item;
	auto bad = [&](const std::string &what) {
		if (why)
			*why = what;
		return EINVAL;
	};
	while (std::getline(ss, item, ',')) {
		if (item.empty())
			continue;
		auto eq = item.find('=');
		if (eq == std::string::npos)
			return bad("'" + item + "' is not KEY=VALUE");
		std::string k = item.substr(0, eq), v = item.substr(eq + 1);
		char *end = nullptr;
		if (k == "seed") {
			uint64_t s;
			if (!util::parse_uint(v.c_str(), &s))
				return bad("seed=" + v + ": expected an unsigned integer");
			r.seed = s;
			continue;
		}
		if (k == "delay" || k == "jitter" || k == "after" || k == "for") {
			uint64_t ns;
			if (!parse_duration(v, &ns))
				return bad(k + "=" + v +
					   ": expected a time with a unit (s, ms, us, ns), "
					   "at most 3600 s");
			(k == "delay"	 ? r.delay_ns
			 : k == "jitter" ? r.jitter_ns
			 : k == "after"	 ? r.after_ns
					 : r.for_ns) = ns;
			continue;
		}
		double x = strtod(v.c_str(), &end);
		if (end == v.c_str() || *end || !(x >= 0 && x <= 1))
			return bad(k + "=" + v + ": expected a probability from 0 to 1");
		if (k == "drop" || k == "loss")
			r.drop = x;
		else if (k == "dup")
			r.dup = x;
		else if (k == "reorder")
			r.reorder = x;
		else if (k == "ce")
			r.ce = x;
		else
			return bad(
				"unknown impairment '" + k +
				"' (drop, loss, dup, reorder, delay, jitter, ce, seed, after, for)");
	}
	if (r.jitter_ns > r.delay_ns)
		return bad("jitter is larger than delay");
	*out = r;
	return 0;
}

std::string Impairment::str() const
{
	std::ostringstream o;
	o << "drop=" << drop << ",dup=" << dup << ",reorder=" << reorder
	  << ",delay=" << delay_ns / 1e3 << "us,jitter=" << jitter_ns / 1e3 << "us,ce=" << ce
	  << ",seed=" << seed;
	if (after_ns || for_ns)
		o << ",after=" << after_ns / 1e6 << "ms,for=" << for_ns / 1e6 << "ms";
	return o.str();
}

} // namespace ibv_coll::emu
