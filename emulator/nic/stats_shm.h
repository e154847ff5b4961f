// Each open device's counters in a small shared-memory segment, so that
// ibv_coll_stat(8) can show every live device of the host: a device lives
// in the process that opened it, and no other process can ask it.
//
// The segment, /dev/shm/ibv_coll.<pid>.<device>.<udp port>, is created
// when the NIC starts and unlinked when it stops.  It describes itself: a
// header, the counters' names (written once), then their values, which
// the engine stores with relaxed atomics from its progress passes (no
// system call, no allocation).  A reader loads each value atomically; the
// values of one read may come from two neighbouring passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ibv_coll::emu::stats {

constexpr char kMagic[8] = {'i', 'b', 'v', 'c', 's', 't', 'a', 't'};
constexpr uint32_t kVersion = 1;
constexpr size_t kNameBytes = 32; // a counter's name, NUL-padded
constexpr size_t kDeviceBytes = 64;
constexpr const char *kPrefix = "ibv_coll."; // of every segment in /dev/shm

struct Header {
	uint64_t magic; // kMagic's bytes, stored last (release): the header is complete
	uint32_t version;
	uint32_t count; // counters
	int32_t pid;
	uint16_t udp_port;
	uint16_t reserved;
	uint64_t start_ticks;  // the process's start time (/proc/<pid>/stat field 22)
	uint64_t publications; // how many times the values were stored
	char device[kDeviceBytes];
	// char names[count][kNameBytes]; uint64_t values[count];
};
static_assert(sizeof(Header) == 104);

inline size_t segment_bytes(uint32_t count)
{
	return sizeof(Header) + count * (kNameBytes + sizeof(uint64_t));
}

// The writing side, owned by the engine.  Every failure is logged once and
// leaves the segment closed: the device works without it.
class Segment {
public:
	Segment() = default;
	~Segment();
	Segment(const Segment &) = delete;
	Segment &operator=(const Segment &) = delete;

	// Create /dev/shm/ibv_coll.<pid>.<device>.<port> listing `names`.
	void open(const std::string &device, uint16_t udp_port,
		  const std::vector<const char *> &names);
	bool is_open() const { return base_ != nullptr; }
	const std::string &path() const { return path_; }
	// Store values[0..count): relaxed atomic stores into the mapping.
	void publish(const uint64_t *values);

private:
	void close();
	uint8_t *base_ = nullptr;
	size_t bytes_ = 0;
	uint32_t count_ = 0;
	std::string name_, path_;
};

// The reading side (ibv_coll_stat).
struct Device {
	std::string path;
	int pid = 0;
	std::string device;
	uint16_t udp_port = 0;
	uint64_t publications = 0;
	std::vector<std::pair<std::string, uint64_t>> counters;
};

// Every segment in /dev/shm (dir, for tests) whose process is alive.  A
// segment whose process is gone (or whose pid now names another process)
// is not listed, and is unlinked when `clean`.  Segments that cannot be
// read are skipped with a message in *skipped.
std::vector<Device> list(const std::string &dir, bool clean, std::vector<std::string> *skipped);

// The start time of a process, from /proc/<pid>/stat; 0 if it is gone.
uint64_t process_start(int pid);

} // namespace ibv_coll::emu::stats
