// Configuration tables: parsing and printing of IBV_COLL_* variables.
#include "util/config.h"

#include "util/log.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace ibv_coll::util {

std::string config_text(const ConfigVar &v)
{
	const char *e = getenv(v.name);
	return e ? std::string(e) : std::string(v.def);
}

bool config_is_set(const ConfigVar &v)
{
	return getenv(v.name) != nullptr;
}

bool parse_uint(const char *s, uint64_t *out)
{
	// Decimal or 0x hex, as documented: strtoull alone would also take
	// octal ("0200" is 128), leading blanks and a sign (" -1" is 2^64 - 1).
	if (!s || !*s)
		return false;
	const bool hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	const char *digits = hex ? s + 2 : s;
	if (!*digits)
		return false;
	for (const char *c = digits; *c; c++)
		if (!(hex ? isxdigit(static_cast<unsigned char>(*c))
			  : isdigit(static_cast<unsigned char>(*c))))
			return false;
	errno = 0;
	char *end = nullptr;
	unsigned long long x = strtoull(digits, &end, hex ? 16 : 10);
	if (errno || end == digits || *end)
		return false;
	*out = x;
	return true;
}

bool parse_size(const char *s, uint64_t *out)
{
	if (!s || !*s)
		return false;
	size_t n = strlen(s);
	unsigned shift = 0;
	switch (s[n - 1]) {
	case 'K':
	case 'k': shift = 10; break;
	case 'M':
	case 'm': shift = 20; break;
	case 'G':
	case 'g': shift = 30; break;
	default: break;
	}
	const std::string digits(s, shift ? n - 1 : n);
	uint64_t x;
	if (!parse_uint(digits.c_str(), &x) || x > UINT64_MAX >> shift)
		return false;
	*out = x << shift;
	return true;
}

bool parse_bool(const char *s, bool *out)
{
	static const char *yes[] = {"1", "y", "yes", "true", "on"};
	static const char *no[] = {"0", "n", "no", "false", "off"};
	for (const char *y : yes)
		if (!strcasecmp(s, y))
			return *out = true, true;
	for (const char *n : no)
		if (!strcasecmp(s, n))
			return *out = false, true;
	return false;
}

namespace {

// A uint or size variable's value, within its range.
bool parse_in_range(const ConfigVar &v, const char *s, uint64_t *out)
{
	uint64_t x;
	if (!(v.kind == ConfigKind::size ? parse_size(s, &x) : parse_uint(s, &x)) || x < v.min ||
	    x > v.max)
		return false;
	*out = x;
	return true;
}

std::string expected_integer(const ConfigVar &v)
{
	return fmt::format("expected an integer in [{}, {}]{}", v.min, v.max,
			   v.kind == ConfigKind::size ? ", with an optional K, M or G suffix" : "");
}

} // namespace

int config_uint(const ConfigVar &v, uint64_t *out)
{
	std::string t = config_text(v);
	if (!parse_in_range(v, t.c_str(), out)) {
		IBVC_ERR("config", "{}={}: {}", v.name, t, expected_integer(v));
		return EINVAL;
	}
	return 0;
}

int config_bool(const ConfigVar &v, bool *out)
{
	std::string t = config_text(v);
	if (!parse_bool(t.c_str(), out)) {
		IBVC_ERR("config", "{}={}: expected a boolean (y/n)", v.name, t);
		return EINVAL;
	}
	return 0;
}

int config_ratio(const ConfigVar &v, double *out)
{
	std::string t = config_text(v);
	errno = 0;
	char *end = nullptr;
	double x = strtod(t.c_str(), &end);
	if (errno || end == t.c_str() || *end || !(x >= 0.0 && x <= 1.0)) {
		IBVC_ERR("config", "{}={}: expected a number in [0, 1]", v.name, t);
		return EINVAL;
	}
	*out = x;
	return 0;
}

std::string config_problem(const ConfigVar &v)
{
	const char *e = getenv(v.name);
	if (!e)
		return {};
	switch (v.kind) {
	case ConfigKind::uint:
	case ConfigKind::size: {
		uint64_t x;
		return parse_in_range(v, e, &x) ? std::string() : expected_integer(v);
	}
	case ConfigKind::boolean: {
		bool b;
		return parse_bool(e, &b) ? std::string() : std::string("expected a boolean (y/n)");
	}
	case ConfigKind::ratio: {
		errno = 0;
		char *end = nullptr;
		double x = strtod(e, &end);
		if (errno || end == e || *end || !(x >= 0.0 && x <= 1.0))
			return "expected a number in [0, 1]";
		return {};
	}
	case ConfigKind::string: {
		const char *why = v.check ? v.check(e) : nullptr;
		return why ? std::string(why) : std::string();
	}
	}
	return {};
}

void print_config_table(FILE *f, const ConfigTable &t)
{
	fprintf(f, "# %s\n", t.component);
	for (const ConfigVar &v : t.vars) {
		fprintf(f, "#   %s\n", v.help);
		const char *e = getenv(v.name);
		std::string bad = config_problem(v);
		if (!bad.empty())
			fprintf(f, "%s=%s    # INVALID: %s; default: %s\n", v.name, e, bad.c_str(),
				v.def);
		else if (e)
			fprintf(f, "%s=%s    # default: %s\n", v.name, e, v.def);
		else
			fprintf(f, "%s=%s\n", v.name, v.def);
	}
}

namespace {
struct Registered {
	ConfigTable table;
	int rank;
};
// A function's static, so that registrars running during static
// initialisation of other files find it constructed.
std::vector<Registered> &registry()
{
	static std::vector<Registered> r;
	return r;
}
} // namespace

ConfigRegistrar::ConfigRegistrar(const ConfigTable &t, int rank)
{
	registry().push_back({t, rank});
}

std::vector<ConfigTable> config_tables()
{
	std::vector<Registered> r = registry();
	std::stable_sort(r.begin(), r.end(),
			 [](const Registered &a, const Registered &b) { return a.rank < b.rank; });
	std::vector<ConfigTable> out;
	for (const Registered &x : r)
		out.push_back(x.table);
	return out;
}

} // namespace ibv_coll::util
