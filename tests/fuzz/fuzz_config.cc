// libFuzzer target: the configuration variables' parsers
// (util/config.cc) against a reference written here from the
// documented syntax, and every IBV_COLL_EMU_* variable, the impairment
// spec included, through load_emu_config.  Input: one byte choosing the
// variable, then its value.
#include "net/udp_port.h"
#include "nic/emu_config.h"
#include "util/config.h"
#include "util/log.h"

#include <strings.h>

#include <cstdlib>
#include <string>

using namespace ibv_coll;

namespace {

// "decimal or 0x hex" (ibv_coll(7)): digits only, no sign, no spaces.
bool ref_uint(const std::string &s, uint64_t *out)
{
	bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
	size_t i = hex ? 2 : 0;
	if (i == s.size())
		return false;
	unsigned __int128 x = 0;
	for (; i < s.size(); i++) {
		int d;
		char c = s[i];
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (hex && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (hex && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return false;
		x = x * (hex ? 16 : 10) + unsigned(d);
		if (x > UINT64_MAX)
			return false;
	}
	*out = uint64_t(x);
	return true;
}

int ref_bool(const std::string &s)
{
	for (const char *y : {"1", "y", "yes", "true", "on"})
		if (!strcasecmp(s.c_str(), y))
			return 1;
	for (const char *n : {"0", "n", "no", "false", "off"})
		if (!strcasecmp(s.c_str(), n))
			return 0;
	return -1;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	std::string v(reinterpret_cast<const char *>(data) + 1, size - 1);
	v = v.substr(0, v.find('\0')); // what an environment variable can hold

	uint64_t a = 0, b = 0;
	bool ok = util::parse_uint(v.c_str(), &a), rok = ref_uint(v, &b);
	if (ok != rok || (ok && a != b)) {
		fprintf(stderr, "parse_uint(\"%s\"): %d %llu, reference %d %llu\n", v.c_str(), ok,
			(unsigned long long)a, rok, (unsigned long long)b);
		abort();
	}
	bool x = false;
	ok = util::parse_bool(v.c_str(), &x);
	int r = ref_bool(v);
	if (ok != (r >= 0) || (ok && int(x) != r))
		abort();
	emu::Impairment imp;
	if (!emu::Impairment::parse(v, &imp) &&
	    !(imp.drop >= 0 && imp.drop <= 1 && imp.dup >= 0 && imp.dup <= 1 && imp.reorder >= 0 &&
	      imp.reorder <= 1))
		abort(); // an accepted spec holds probabilities

	// One variable through the loader, as a context opening would read it.
	auto vars = emu::emu_config_vars();
	const util::ConfigVar &cv = vars[data[0] % vars.size()];
	// putenv on a buffer of ours: setenv would keep a copy of every value
	// ever set (glibc never frees them) and the run would end out of memory.
	static char env[8192];
	snprintf(env, sizeof(env), "%s=%s", cv.name, v.c_str());
	putenv(env);
	emu::EmuConfig c;
	int err = emu::load_emu_config(&c);
	if (err && err != EINVAL)
		abort();
	std::string seen = getenv(cv.name) ? getenv(cv.name) : "";
	v = seen; // what the loader read (a value longer than the buffer is cut)
	if (!err && cv.kind == util::ConfigKind::uint) {
		uint64_t want;
		if (!ref_uint(v, &want) || want < cv.min || want > cv.max)
			abort(); // the loader took a value out of the variable's range
	}
	unsetenv(cv.name);
	return 0;
}

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	setenv("IBV_COLL_LOG_LEVEL", "off", 1); // every rejected value logs a line
	return 0;
}
