// The shared-memory counter segments of open devices (see stats_shm.h).
#include "nic/stats_shm.h"

#include "util/fd.h"
#include "util/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ibv_coll::emu::stats {

namespace {

uint64_t *values_of(uint8_t *base, uint32_t count)
{
	return reinterpret_cast<uint64_t *>(base + sizeof(Header) + count * kNameBytes);
}

} // namespace

uint64_t process_start(int pid)
{
	std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
	std::string line;
	if (!std::getline(f, line))
		return 0;
	// The command name (field 2) may hold spaces and parentheses: count
	// fields from the last ')'.
	size_t rp = line.rfind(')');
	if (rp == std::string::npos)
		return 0;
	std::istringstream in(line.substr(rp + 2));
	std::string field;
	// Fields 3..21 come before starttime (22).
	for (int i = 3; i < 22; i++)
		if (!(in >> field))
			return 0;
	uint64_t start = 0;
	in >> start;
	return start;
}

Segment::~Segment()
{
	close();
}

void Segment::open(const std::string &device, uint16_t udp_port,
		   const std::vector<const char *> &names)
{
	const uint32_t count = uint32_t(names.size());
	const size_t bytes = segment_bytes(count);
	const int pid = int(getpid());
	util::UniqueFd fd;
	// Two contexts of one process on one device have two ports; a
	// transport without ports (verbs) tells them apart by a suffix.
	for (int n = 0; n < 16 && !fd; n++) {
		name_ = "/" + std::string(kPrefix) + std::to_string(pid) + "." + device + "." +
			std::to_string(udp_port) + (n ? "." + std::to_string(n) : "");
		fd.reset(shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
		if (!fd && errno != EEXIST)
			break;
	}
	if (!fd) {
		IBVC_INFO("emu", "{}: no counter segment {}: {}", device, name_,
			  util::errstr(errno));
		return;
	}
	void *m = MAP_FAILED;
	if (ftruncate(fd.get(), off_t(bytes)) == 0)
		m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
	if (m == MAP_FAILED) {
		IBVC_INFO("emu", "{}: counter segment {}: {}", device, name_, util::errstr(errno));
		shm_unlink(name_.c_str());
		return;
	}
	base_ = static_cast<uint8_t *>(m);
	bytes_ = bytes;
	count_ = count;
	path_ = "/dev/shm" + name_;
	auto *h = reinterpret_cast<Header *>(base_);
	h->version = kVersion;
	h->count = count;
	h->pid = pid;
	h->udp_port = udp_port;
	h->start_ticks = process_start(pid);
	snprintf(h->device, sizeof(h->device), "%s", device.c_str());
	for (uint32_t i = 0; i < count; i++)
		snprintf(reinterpret_cast<char *>(base_ + sizeof(Header) + i * kNameBytes),
			 kNameBytes, "%s", names[i]);
	// The magic last: a reader that sees it sees a complete header.
	uint64_t magic;
	memcpy(&magic, kMagic, sizeof(magic));
	std::atomic_ref<uint64_t>(h->magic).store(magic, std::memory_order_release);
}

void Segment::publish(const uint64_t *v)
{
	if (!base_)
		return;
	uint64_t *dst = values_of(base_, count_);
	for (uint32_t i = 0; i < count_; i++)
		std::atomic_ref<uint64_t>(dst[i]).store(v[i], std::memory_order_relaxed);
	auto *h = reinterpret_cast<Header *>(base_);
	std::atomic_ref<uint64_t>(h->publications).fetch_add(1, std::memory_order_relaxed);
}

void Segment::close()
{
	if (!base_)
		return;
	munmap(base_, bytes_);
	shm_unlink(name_.c_str());
	base_ = nullptr;
}

namespace {

// Read one segment; false (with *why) if it is not one we can read.
bool read_segment(const std::string &path, Device *d, std::string *why, bool *dead)
{
	*dead = false;
	util::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
	struct stat st {};
	if (!fd || fstat(fd.get(), &st)) {
		*why = strerror(errno);
		return false;
	}
	if (size_t(st.st_size) < sizeof(Header)) {
		*why = "too short";
		return false;
	}
	void *m = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd.get(), 0);
	if (m == MAP_FAILED) {
		*why = strerror(errno);
		return false;
	}
	struct Unmap {
		void *m;
		size_t n;
		~Unmap() { munmap(m, n); }
	} unmap{m, size_t(st.st_size)};
	auto *base = static_cast<uint8_t *>(m);
	Header h;
	memcpy(&h, base, sizeof(h));
	if (memcmp(&h.magic, kMagic, sizeof(kMagic)) || h.version != kVersion || h.count > 4096 ||
	    segment_bytes(h.count) > size_t(st.st_size)) {
		*why = "not a counter segment of this version";
		return false;
	}
	const uint64_t start = process_start(h.pid);
	if (h.pid <= 0 || !start || (h.start_ticks && start != h.start_ticks) ||
	    (kill(h.pid, 0) && errno == ESRCH)) {
		*dead = true;
		*why = "process " + std::to_string(h.pid) + " is gone";
		return false;
	}
	d->path = path;
	d->pid = h.pid;
	d->device.assign(h.device, strnlen(h.device, sizeof(h.device)));
	d->udp_port = h.udp_port;
	d->publications = std::atomic_ref<uint64_t>(reinterpret_cast<Header *>(base)->publications)
				  .load(std::memory_order_relaxed);
	uint64_t *vals = values_of(base, h.count);
	for (uint32_t i = 0; i < h.count; i++) {
		const char *n = reinterpret_cast<const char *>(base + sizeof(Header) +
							       i * kNameBytes);
		d->counters.emplace_back(
			std::string(n, strnlen(n, kNameBytes)),
			std::atomic_ref<uint64_t>(vals[i]).load(std::memory_order_relaxed));
	}
	return true;
}

} // namespace

std::vector<Device> list(const std::string &dir, bool clean, std::vector<std::string> *skipped)
{
	std::vector<Device> out;
	DIR *dp = opendir(dir.c_str());
	if (!dp) {
		skipped->push_back(dir + ": " + strerror(errno));
		return out;
	}
	std::vector<std::string> names;
	while (dirent *e = readdir(dp))
		if (!strncmp(e->d_name, kPrefix, strlen(kPrefix)))
			names.emplace_back(e->d_name);
	closedir(dp);
	std::sort(names.begin(), names.end());
	for (const std::string &n : names) {
		const std::string path = dir + "/" + n;
		Device d;
		std::string why;
		bool dead;
		if (read_segment(path, &d, &why, &dead)) {
			out.push_back(std::move(d));
			continue;
		}
		if (dead && clean && unlink(path.c_str()) == 0)
			why += ", removed";
		skipped->push_back(path + ": " + why);
	}
	return out;
}

} // namespace ibv_coll::emu::stats
