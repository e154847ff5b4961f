// The core library's own helpers: exception guards for the C ABI, the
// provider registry and the core configuration table.
#pragma once

#include "driver.h"
#include "util/log.h"

#include <cerrno>
#include <new>
#include <span>
#include <string>
#include <vector>

#define IBV_COLL_EXPORT extern "C" __attribute__((visibility("default")))

namespace ibv_coll::core {

// No C++ exception crosses the ABI: each entry point runs its body inside
// one of these, which maps and logs what escapes.
template <class F> int guard_int(const char *fn, F &&f) noexcept
{
	try {
		return f();
	} catch (const std::bad_alloc &) {
		IBVC_ERR("core", "{}: out of memory", fn);
		return ENOMEM;
	} catch (const std::exception &e) {
		IBVC_ERR("core", "{}: {}", fn, e.what());
		return EIO;
	} catch (...) {
		IBVC_ERR("core", "{}: unknown exception", fn);
		return EIO;
	}
}

template <class T, class F> T *guard_ptr(const char *fn, F &&f) noexcept
{
	try {
		return f();
	} catch (const std::bad_alloc &) {
		IBVC_ERR("core", "{}: out of memory", fn);
		errno = ENOMEM;
	} catch (const std::exception &e) {
		IBVC_ERR("core", "{}: {}", fn, e.what());
		errno = EIO;
	} catch (...) {
		IBVC_ERR("core", "{}: unknown exception", fn);
		errno = EIO;
	}
	return nullptr;
}

// Make the context's async event fd (async.cc).  0 or errno.
int async_open(Context *ctx);

// Every provider compiled in, with null ops replaced by EOPNOTSUPP stubs.
std::span<const Provider *const> providers();

// IBV_COLL_* variables set in the environment that no table lists.
std::vector<std::string> unknown_config_vars();
// At the first context open: warn about those, once per process (a value
// that does not parse is an error where it is read).
void warn_config_once();

} // namespace ibv_coll::core
