// The counters' ways out of a process: a switch's STATS answer (never
// longer than the request, paged when it does not fit, short requests
// dropped) and the shared-memory segments of devices (listed while their
// process lives, dropped and removed when it is gone).
#include "nic/stats_shm.h"
#include "stat/switch_query.h"
#include "switch/switch.h"
#include "util/fd.h"
#include "wire/ceth.h"
#include "wire/icrc.h"
#include "wire/roce.h"
#include "wire/swproto.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

using namespace ibv_coll::emu;

namespace {

// A switch on a free port, served by a thread until the test ends.
struct RunningSwitch {
	SwitchParams p;
	std::unique_ptr<Switch> sw;
	std::atomic<bool> stop{false};
	std::thread t;
	RunningSwitch()
	{
		p.name = "unit\"sw";
		p.port = 0;
		p.units = 64;
		sw = std::make_unique<Switch>(p);
		if (sw->open() == 0)
			t = std::thread([this] { sw->run(stop); });
	}
	~RunningSwitch()
	{
		stop = true;
		if (t.joinable())
			t.join();
	}
	std::string addr() const { return "127.0.0.1:" + std::to_string(sw->port()); }
};

} // namespace

TEST(SwitchStats, AnswersEveryCounterAndPagesWhatDoesNotFit)
{
	RunningSwitch s;
	ASSERT_TRUE(s.t.joinable());
	stat::SwitchStats a, b;
	std::string err;
	ASSERT_EQ(stat::query_switch(s.addr(), 1000, &a, &err), 0) << err;
	EXPECT_EQ(a.name, "unit\"sw");
	// The totals by name, then the pool: what this test set up.
	std::map<std::string, uint64_t> m(a.counters.begin(), a.counters.end());
	EXPECT_EQ(a.counters.size(), named_counters(SwitchCounters{}).size() + 3);
	EXPECT_EQ(m.at("units"), 64u);
	EXPECT_EQ(m.at("units_in_use"), 0u);
	EXPECT_EQ(m.at("jobs"), 0u);
	EXPECT_EQ(m.at("data"), 0u);
	EXPECT_GE(m.at("rx_packets"), 1u); // this request
	// Room for two records a reply: the same names, in as many requests
	// as it takes.
	ASSERT_EQ(stat::query_switch(s.addr(), 1000, &b, &err, sw::kStatsNameBytes + 2 * 32), 0)
		<< err;
	ASSERT_EQ(b.counters.size(), a.counters.size());
	for (size_t i = 0; i < a.counters.size(); i++)
		EXPECT_EQ(b.counters[i].first, a.counters[i].first);
	// Room for the name only: the switch sends no record, and the asker
	// says so rather than looping.
	EXPECT_EQ(stat::query_switch(s.addr(), 1000, &b, &err, sw::kStatsNameBytes), EPROTO);
}

TEST(SwitchStats, ReplyIsNeverLongerThanTheRequestAndShortOnesAreDropped)
{
	RunningSwitch s;
	ASSERT_TRUE(s.t.joinable());
	ibv_coll::util::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	sockaddr_in to{};
	to.sin_family = AF_INET;
	to.sin_port = htons(s.sw->port());
	to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr *>(&to), sizeof(to)), 0);
	sockaddr_in me{};
	socklen_t ml = sizeof(me);
	getsockname(fd.get(), reinterpret_cast<sockaddr *>(&me), &ml);
	wire::UdpEndpoints ep{};
	ep.src[10] = ep.src[11] = ep.dst[10] = ep.dst[11] = 0xff;
	memcpy(ep.src + 12, &me.sin_addr, 4);
	memcpy(ep.dst + 12, &to.sin_addr, 4);
	ep.sport = ntohs(me.sin_port);
	ep.dport = s.sw->port();
	// Request payloads from too short to larger than every record needs.
	for (uint32_t pad : {0u, 16u, 31u, 32u, 100u, 200u, 1024u, 2000u}) {
		std::vector<uint8_t> req(wire::kBthBytes + wire::kCethBytes + pad +
					 wire::kIcrcBytes);
		wire::Bth bth;
		bth.opcode = wire::kCollStats;
		bth.store(req.data());
		wire::Ceth h;
		h.mid = 77 + pad;
		h.len = uint16_t(pad);
		h.store(req.data() + wire::kBthBytes);
		const size_t roce = req.size() - wire::kIcrcBytes;
		wire::store_icrc(req.data() + roce, wire::icrc(ep, req.data(), roce));
		ASSERT_EQ(send(fd.get(), req.data(), req.size(), 0), ssize_t(req.size()));
		uint8_t rsp[8192];
		pollfd pf{fd.get(), POLLIN, 0};
		const bool answered = poll(&pf, 1, 300) == 1;
		if (pad < sw::kStatsNameBytes) {
			EXPECT_FALSE(answered) << "a request of " << pad << " bytes was answered";
			continue;
		}
		ASSERT_TRUE(answered) << pad;
		ssize_t n = recv(fd.get(), rsp, sizeof(rsp), 0);
		ASSERT_GT(n, 0);
		EXPECT_LE(size_t(n), req.size()) << "reply longer than its request of " << pad;
		EXPECT_EQ(rsp[0], wire::kCollStatsReply);
		wire::Ceth r = wire::Ceth::load(rsp + wire::kBthBytes);
		EXPECT_EQ(r.mid, 77 + pad);
		const size_t records = (size_t(n) - wire::kBthBytes - wire::kCethBytes -
					wire::kIcrcBytes - sw::kStatsNameBytes) /
				       sw::kStatsRecordBytes;
		EXPECT_EQ(records, std::min<size_t>(r.seg, (pad - sw::kStatsNameBytes) / 32))
			<< pad;
	}
	s.stop = true;
	s.t.join();
	EXPECT_EQ(s.sw->totals().drop_malformed, 3u); // 0, 16 and 31 bytes
}

TEST(StatsShm, LiveSegmentListedWithItsValues)
{
	auto seg = std::make_unique<stats::Segment>();
	const std::string dev = "unit_dev" + std::to_string(getpid());
	seg->open(dev, 4242, {"alpha", "beta_counter"});
	ASSERT_TRUE(seg->is_open());
	const uint64_t v[2] = {7, 1ull << 40};
	seg->publish(v);
	std::vector<std::string> skipped;
	auto list = stats::list("/dev/shm", false, &skipped);
	const stats::Device *d = nullptr;
	for (const auto &x : list)
		if (x.device == dev)
			d = &x;
	ASSERT_NE(d, nullptr);
	EXPECT_EQ(d->pid, getpid());
	EXPECT_EQ(d->udp_port, 4242);
	ASSERT_EQ(d->counters.size(), 2u);
	EXPECT_EQ(d->counters[0], std::make_pair(std::string("alpha"), uint64_t(7)));
	EXPECT_EQ(d->counters[1], std::make_pair(std::string("beta_counter"), uint64_t(1) << 40));
	EXPECT_EQ(d->publications, 1u);
	const std::string path = seg->path();
	EXPECT_EQ(path, "/dev/shm/ibv_coll." + std::to_string(getpid()) + "." + dev + ".4242");
	EXPECT_EQ(access(path.c_str(), F_OK), 0);
	seg.reset(); // as a device closes
	EXPECT_NE(access(path.c_str(), F_OK), 0) << "closing left the segment behind";
}

TEST(StatsShm, SegmentOfADeadProcessIsSkippedAndRemoved)
{
	// A segment as a process writes it, for a pid that has exited.
	pid_t child = fork();
	if (!child)
		_exit(0);
	ASSERT_GT(child, 0);
	waitpid(child, nullptr, 0);
	char dir[] = "/tmp/ibvc_shm_XXXXXX";
	ASSERT_NE(mkdtemp(dir), nullptr);
	stats::Header h{};
	memcpy(&h.magic, stats::kMagic, sizeof(h.magic));
	h.version = stats::kVersion;
	h.count = 1;
	h.pid = child;
	h.start_ticks = 1;
	snprintf(h.device, sizeof(h.device), "crxe_dead");
	std::vector<uint8_t> file(stats::segment_bytes(1));
	memcpy(file.data(), &h, sizeof(h));
	memcpy(file.data() + sizeof(h), "x", 2);
	const std::string path = std::string(dir) + "/ibv_coll." + std::to_string(child) +
				 ".crxe_dead.1";
	std::ofstream(path, std::ios::binary)
		.write(reinterpret_cast<char *>(file.data()), std::streamsize(file.size()));
	// Not stats: a file of another kind in the same folder is left alone.
	const std::string other = std::string(dir) + "/ibv_coll.junk";
	std::ofstream(other) << "junk";

	std::vector<std::string> skipped;
	EXPECT_TRUE(stats::list(dir, false, &skipped).empty());
	ASSERT_EQ(skipped.size(), 2u);
	EXPECT_EQ(access(path.c_str(), F_OK), 0) << "removed without being asked to";
	skipped.clear();
	EXPECT_TRUE(stats::list(dir, true, &skipped).empty());
	EXPECT_NE(access(path.c_str(), F_OK), 0) << "a dead process's segment was kept";
	EXPECT_EQ(access(other.c_str(), F_OK), 0) << "a file that is not a segment was removed";
	unlink(other.c_str());
	rmdir(dir);
}
