// Collectives across processes on the loopback device: N nodes x k local
// ranks x every collective, each node checking its destinations against
// the independent reference; the same under injected loss, duplication and
// reordering; and a member killed mid-allreduce.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace {

struct NodeSet {
	int nodes;
	std::string ranks; // "2" for all, or "2,1,3"
	std::string scenario;
	std::vector<std::string> env;  // NAME=VALUE for every node
	std::vector<std::string> args; // extra coll_node flags
	int timeout_s = 240;
	std::string name;
	// Aggregation switches to start first: one ibv_coll_switchd per entry
	// (its extra flags); "@i" in args becomes switch i's port.
	std::vector<std::string> switches = {};
	std::vector<std::string> sw_env = {};
	// Kill switch 0 this long after the nodes start and start a new one
	// on its port 300 ms later (0: never).
	int restart_sw_ms = 0;
};

std::vector<char *> cstrs(std::vector<std::string> &v)
{
	std::vector<char *> p;
	for (auto &s : v)
		p.push_back(s.data());
	p.push_back(nullptr);
	return p;
}

std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream ss;
	ss << f.rdbuf();
	return ss.str();
}

// Start every node, wait for all of them (killing the lot past the
// timeout), and return each node's exit status (-1: killed).
std::vector<int> launch(const NodeSet &r, std::string *logs, std::string *sw_stats = nullptr)
{
	static int seq;
	std::string tag = std::to_string(getpid()) + "_" + std::to_string(seq++);
	std::string boot = "unix:/tmp/ibvc_coll_" + tag + ".sock";
	std::vector<pid_t> pids;
	std::vector<std::string> outs;
	// The switches, each on a free port it reports through a file.
	std::vector<pid_t> sw_pids;
	std::vector<std::string> sw_ports, sw_outs;
	// Switch i on a port (0: a free one, reported through a file).
	auto start_switch = [&](size_t i, const std::string &on_port) {
		std::string pf = "/tmp/ibvc_sw_" + tag + "_" + std::to_string(i) + ".port";
		std::string out = "/tmp/ibvc_sw_" + tag + "_" + std::to_string(i) + ".log";
		unlink(pf.c_str());
		std::vector<std::string> a = {
			SWITCHD_PATH, "-p", on_port, "-P", pf, "-n", "sw" + std::to_string(i)};
		std::stringstream ss(r.switches[i]);
		for (std::string w; ss >> w;)
			a.push_back(w);
		std::vector<std::string> env_s;
		for (char **e = environ; *e; e++)
			env_s.emplace_back(*e);
		env_s.insert(env_s.end(), r.sw_env.begin(), r.sw_env.end());
		auto argv = cstrs(a), envp = cstrs(env_s);
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(
			&fa, 1, out.c_str(),
			O_WRONLY | O_CREAT | (on_port == "0" ? O_TRUNC : O_APPEND), 0644);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
		pid_t pid;
		int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
		posix_spawn_file_actions_destroy(&fa);
		EXPECT_EQ(err, 0);
		std::string port;
		for (int t = 0; t < 500 && port.empty(); t++) {
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
			port = slurp(pf);
			while (!port.empty() && (port.back() == '\n'))
				port.pop_back();
		}
		EXPECT_FALSE(port.empty()) << "switch " << i << " did not start";
		unlink(pf.c_str());
		if (i == sw_pids.size()) {
			sw_pids.push_back(err ? -1 : pid);
			sw_outs.push_back(out);
			sw_ports.push_back(port);
		} else {
			sw_pids[i] = err ? -1 : pid;
		}
	};
	for (size_t i = 0; i < r.switches.size(); i++)
		start_switch(i, "0");
	for (int i = 0; i < r.nodes; i++) {
		std::vector<std::string> a = {COLL_NODE_PATH,
					      "--boot",
					      boot,
					      "--node",
					      std::to_string(i),
					      "--nodes",
					      std::to_string(r.nodes),
					      "--ranks",
					      r.ranks,
					      "--scenario",
					      r.scenario};
		for (std::string x : r.args) {
			for (size_t k = sw_ports.size(); k-- > 0;) {
				std::string ph = "@" + std::to_string(k);
				for (size_t at; (at = x.find(ph)) != std::string::npos;)
					x.replace(at, ph.size(), sw_ports[k]);
			}
			a.push_back(x);
		}
		std::vector<std::string> env_s;
		for (char **e = environ; *e; e++)
			env_s.emplace_back(*e);
		env_s.insert(env_s.end(), r.env.begin(), r.env.end());
		auto argv = cstrs(a), envp = cstrs(env_s);
		std::string out = "/tmp/ibvc_coll_" + tag + "_" + std::to_string(i) + ".log";
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
						 0644);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
		pid_t pid;
		int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
		posix_spawn_file_actions_destroy(&fa);
		EXPECT_EQ(err, 0);
		pids.push_back(err ? -1 : pid);
		outs.push_back(out);
	}
	std::vector<int> status(size_t(r.nodes), -1);
	auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(r.timeout_s);
	size_t left = pids.size();
	const auto restart_at = std::chrono::steady_clock::now() +
				std::chrono::milliseconds(r.restart_sw_ms);
	bool restarted = !r.restart_sw_ms;
	while (left && std::chrono::steady_clock::now() < deadline) {
		if (!restarted && std::chrono::steady_clock::now() >= restart_at) {
			restarted = true;
			kill(sw_pids[0], SIGKILL);
			int st;
			waitpid(sw_pids[0], &st, 0);
			std::this_thread::sleep_for(std::chrono::milliseconds(300));
			start_switch(0, sw_ports[0]);
		}
		for (size_t i = 0; i < pids.size(); i++) {
			int st;
			if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
				status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
				pids[i] = -1;
				left--;
			}
		}
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
	}
	for (pid_t p : pids) {
		if (p > 0) {
			kill(p, SIGKILL);
			int st;
			waitpid(p, &st, 0);
		}
	}
	for (size_t i = 0; i < outs.size(); i++) {
		*logs += "--- node " + std::to_string(i) + " (exit " + std::to_string(status[i]) +
			 ")\n" + slurp(outs[i]);
		unlink(outs[i].c_str());
	}
	for (size_t i = 0; i < sw_pids.size(); i++) {
		if (sw_pids[i] > 0) {
			kill(sw_pids[i], SIGTERM);
			int st;
			waitpid(sw_pids[i], &st, 0);
		}
		std::string text = slurp(sw_outs[i]);
		*logs += "--- switch " + std::to_string(i) + "\n" + text;
		if (sw_stats)
			*sw_stats += text;
		unlink(sw_outs[i].c_str());
	}
	return status;
}

class Coll : public ::testing::TestWithParam<NodeSet> {};

TEST_P(Coll, EveryNodeMatchesTheReference)
{
	const NodeSet &r = GetParam();
	std::string logs;
	std::vector<int> st = launch(r, &logs);
	for (int i = 0; i < r.nodes; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	if (HasFailure())
		std::cout << logs;
	else
		std::cout << logs.substr(0, 4000);
}

std::vector<NodeSet> runs()
{
	std::vector<NodeSet> v;
	for (int n : {1, 2, 3, 4})
		for (const char *k : {"1", "2", "4"})
			v.push_back({n, k, "full", {}, {}, 240, ""});
	v.push_back({3, "2,1,3", "full", {}, {}, 240, ""});
	v.push_back({8, "1", "full", {}, {}, 240, ""});
	v.push_back({8, "2", "full", {}, {}, 240, ""});
	v.push_back({4, "2", "full", {}, {"--mtu", "5"}, 240, "mtu4096"});
	// (Each node checks its 16 MiB results against the scalar reference
	// before it starts the next collective, for tens of seconds on 2 busy
	// cores; the nodes meet before each (coll_node), and a long job
	// timeout leaves room for a descheduled member.)
	v.push_back({4, "2", "big", {}, {"--mtu", "5", "--timeout-ms", "60000"}, 300, ""});
	// A member 1.5 s late for its second collective: the repeats of the
	// blocks already sent back off (checked by each node).
	v.push_back({4, "2", "full", {}, {"--late", "1:1500:1"}, 240, "late_block"});
	const std::string loss = "IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=3";
	v.push_back({4, "2", "lossy", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, ""});
	v.push_back({3, "1", "lossy", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, ""});
	v.push_back(
		{3, "2,1,3", "full", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, "lossy"});
	// Members several messages apart (small broadcasts' trees) meeting in
	// collectives of many blocks, calm and with loss.
	v.push_back({6, "1", "drift", {}, {}, 240, ""});
	v.push_back({5, "2", "drift", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, "lossy"});
	return v;
}

std::string run_name(const ::testing::TestParamInfo<NodeSet> &i)
{
	std::string k = i.param.ranks;
	for (char &c : k)
		if (c == ',')
			c = '_';
	std::string s = "n" + std::to_string(i.param.nodes) + "k" + k + "_" + i.param.scenario;
	if (!i.param.name.empty())
		s += "_" + i.param.name;
	return s;
}

INSTANTIATE_TEST_SUITE_P(Loopback, Coll, ::testing::ValuesIn(runs()), run_name);

// Through aggregation switches: one switch, two leaves under a spine, two
// planes, inline configuration; the tree's fold order is the reference's.
std::vector<NodeSet> switch_runs()
{
	std::vector<NodeSet> v;
	const std::string loss = "IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=9";
	const std::string loss1 = "IBV_COLL_EMU_IMPAIR=drop=0.01,dup=0.01,reorder=0.01,seed=4";
	const std::string rto = "IBV_COLL_EMU_COLL_RTO_US=5000";
	v.push_back(
		{4, "2", "switch", {}, {"--topology", "1", "--leaves", "@0"}, 240, "one", {""}});
	v.push_back(
		{8, "2", "switch", {}, {"--topology", "1", "--leaves", "@0"}, 240, "one", {""}});
	v.push_back({3,
		     "2,1,3",
		     "switch",
		     {},
		     {"--topology", "1", "--leaves", "@0"},
		     240,
		     "uneven",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2", "--member-leaf",
		      "0,1,0,1", "--expect-flags", "0xc00"},
		     240,
		     "hier",
		     {"", "", ""}});
	v.push_back({8,
		     "2",
		     "switch",
		     {},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2", "--member-leaf",
		      "0,0,0,1,1,1,1,0", "--expect-flags", "0xc00"},
		     240,
		     "hier",
		     {"", "", ""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "1", "--planes", "2", "--leaves", "@0,@1"},
		     240,
		     "planes",
		     {"", ""}});
	v.push_back({8,
		     "2",
		     "switch",
		     {},
		     {"--topology", "2", "--planes", "2", "--leaves", "@0,@1,@2,@3", "--spines",
		      "@4,@5", "--member-leaf", "0,1,0,1,0,1,0,1", "--expect-flags", "0xc00"},
		     240,
		     "hier_planes",
		     {"", "", "", "", "", ""}});
	// Three levels through the verbs API (IBV_COLL_JOB_ATTR_PODS): two
	// pods of one leaf each, a spine per pod, a core above.
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2,@3", "--cores", "@4",
		      "--leaf-pod", "0,1", "--member-leaf", "0,1,0,1", "--expect-flags", "0xc00"},
		     240,
		     "pods",
		     {"", "", "", "", ""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--inline"},
		     240,
		     "inline",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--e2e-ack"},
		     240,
		     "e2e",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {"IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=2",
		      "IBV_COLL_EMU_COLL_RTO_US=5000"},
		     {"--topology", "1", "--leaves", "@0", "--e2e-ack"},
		     240,
		     "e2e_loss5",
		     {""},
		     {"IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=2"}});
	v.push_back({4,
		     "2",
		     "switchbig",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--mtu", "5", "--timeout-ms", "60000"},
		     300,
		     "",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {loss, rto},
		     {"--topology", "1", "--leaves", "@0"},
		     240,
		     "loss5",
		     {""},
		     {loss}});
	v.push_back({8,
		     "2",
		     "switch",
		     {loss1, rto},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2", "--member-leaf",
		      "0,0,0,0,1,1,1,1", "--expect-flags", "0xc00"},
		     240,
		     "hier_loss1",
		     {"", "", ""},
		     {loss1}});
	v.push_back({4,
		     "2",
		     "switch",
		     {loss, rto},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2", "--member-leaf",
		      "0,1,0,1", "--expect-flags", "0xc00"},
		     240,
		     "hier_loss5",
		     {"", "", ""},
		     {loss}});
	// What each NIC sends for a 4 MiB allreduce (checked by each node):
	// via the switch at most S x 1.03, via the ring about 2S(N-1)/N.
	v.push_back({4,
		     "2",
		     "traffic",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--mtu", "5"},
		     240,
		     "switch",
		     {""}});
	v.push_back({8,
		     "1",
		     "traffic",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--mtu", "5"},
		     240,
		     "switch",
		     {""}});
	// (A long retransmission timeout: on 2 cores 8 nodes run late, and a
	// block sent again early is load, not the protocol's traffic.)
	const std::string slow_rto = "IBV_COLL_EMU_COLL_RTO_US=300000";
	const std::string slow_probe = "IBV_COLL_EMU_COLL_PROBE_US=300000";
	v.push_back({4, "2", "traffic", {slow_rto, slow_probe}, {"--mtu", "5"}, 240, "ring"});
	v.push_back({8, "1", "traffic", {slow_rto, slow_probe}, {"--mtu", "5"}, 240, "ring"});
	// A member 1.5 s late (as a loaded machine can start one): the
	// others send their partials again, and every node between carries
	// them on again; what they send must still be accounted for.
	v.push_back({8,
		     "1",
		     "traffic",
		     {slow_rto, slow_probe},
		     {"--mtu", "5", "--late", "5:1500"},
		     240,
		     "ring_late"});
	// A member that starts its first collective long after the others (and
	// after IBV_COLL_EMU_SW_CONFIG_MS): the switch tells the early ones to
	// wait, so they neither fail nor (AUTO) go round the ring alone.
	const std::string cfg200 = "IBV_COLL_EMU_SW_CONFIG_MS=200";
	v.push_back({4,
		     "2",
		     "switch",
		     {cfg200},
		     {"--topology", "1", "--leaves", "@0", "--late", "3:1500"},
		     240,
		     "late_member",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {cfg200},
		     {"--topology", "3", "--leaves", "@0", "--late", "0:1500", "--expect-flags",
		      "0x400"},
		     240,
		     "auto_late_member",
		     {""}});
	v.push_back({4,
		     "2",
		     "switch",
		     {cfg200},
		     {"--topology", "2", "--leaves", "@0,@1", "--spines", "@2", "--member-leaf",
		      "0,1,0,1", "--expect-flags", "0xc00", "--late", "2:1500"},
		     240,
		     "hier_late_member",
		     {"", "", ""}});
	// A member 1.5 s late for a later, one-block collective: the others'
	// repeats back off (checked by each node).
	v.push_back({4,
		     "2",
		     "switch",
		     {},
		     {"--topology", "1", "--leaves", "@0", "--late", "1:1500:1"},
		     240,
		     "late_block",
		     {""}});
	// AUTO: a switch that refuses (one Seg unit per job), and none at all.
	v.push_back({4,
		     "2",
		     "full",
		     {},
		     {"--topology", "3", "--leaves", "@0", "--expect-flags", "0x1200"},
		     240,
		     "auto_denied",
		     {"-m 1"}});
	v.push_back({4,
		     "1",
		     "full",
		     {"IBV_COLL_EMU_SW_CONFIG_MS=300"},
		     {"--topology", "3", "--leaves", "9", "--expect-flags", "0x1200"},
		     240,
		     "auto_absent"});
	return v;
}

// The sum over the switches' "total:" lines of counter `name`.
uint64_t total_counter(const std::string &stats, const std::string &name)
{
	uint64_t sum = 0;
	std::stringstream ss(stats);
	for (std::string line; std::getline(ss, line);) {
		if (line.find("total:") == std::string::npos)
			continue;
		size_t at = line.find(" " + name + " ");
		if (at != std::string::npos)
			sum += strtoull(line.c_str() + at + name.size() + 2, nullptr, 10);
	}
	return sum;
}

class CollSwitch : public ::testing::TestWithParam<NodeSet> {};

TEST_P(CollSwitch, EveryNodeMatchesTheReference)
{
	const NodeSet &r = GetParam();
	std::string logs, stats;
	std::vector<int> st = launch(r, &logs, &stats);
	for (int i = 0; i < r.nodes; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	// Under loss the switches saw repeats and answered some from their
	// shadow copies (the results being bit-exact shows none was reduced
	// twice).
	if (!r.sw_env.empty()) {
		EXPECT_GT(total_counter(stats, "duplicates"), 0u);
		EXPECT_GT(total_counter(stats, "retrans_answered"), 0u);
	}
	if (HasFailure())
		std::cout << logs;
	else
		std::cout << logs.substr(0, 6000);
}

INSTANTIATE_TEST_SUITE_P(Loopback, CollSwitch, ::testing::ValuesIn(switch_runs()), run_name);

TEST(CollSwitchFailure, DeadSwitchGivesEveryoneAnErrorWithinTheBound)
{
	// The switch stops dead after 3000 partials of a 32 MiB allreduce; with
	// a 1 s job timeout every member completes with an error within 3 s.
	NodeSet r{4,
		  "1",
		  "swdie",
		  {},
		  {"--topology", "1", "--leaves", "@0", "--timeout-ms", "1000"},
		  60,
		  "",
		  {"-X 3000"}};
	std::string logs;
	auto t0 = std::chrono::steady_clock::now();
	std::vector<int> st = launch(r, &logs);
	auto dt = std::chrono::steady_clock::now() - t0;
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	EXPECT_LT(dt, std::chrono::seconds(8));
	std::cout << logs;
}

TEST(CollSwitchFailure, RestartedSwitchLearnsTheJobWithinTheTimeout)
{
	// The switch is killed 1 s into a run of collectives (50 ms apart) and
	// a new one starts on its port 300 ms later, knowing no job, with the
	// default idle timeout (the members' keepalive every 20 s): the
	// members must configure it again on their own, within the job's 3 s
	// timeout, and every collective completes, right (coll_node checks
	// each against the reference).
	NodeSet r{4,
		  "1",
		  "switch",
		  {},
		  {"--topology", "1", "--leaves", "@0", "--timeout-ms", "3000", "--pause-ms", "50"},
		  120,
		  "",
		  {""}};
	r.restart_sw_ms = 1000;
	// Configured, and inline (the task in every DATA: the new switch
	// learns the job from those).
	for (bool inl : {false, true}) {
		SCOPED_TRACE(inl ? "inline" : "configured");
		NodeSet ri = r;
		if (inl)
			ri.args.push_back("--inline");
		std::string logs, stats;
		std::vector<int> st = launch(ri, &logs, &stats);
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
		// The new switch (the old one, killed, printed nothing) served them.
		EXPECT_GT(total_counter(stats, "delivered"), 0u);
		if (HasFailure())
			std::cout << logs;
	}
}

TEST(CollSwitchFailure, MemberLaterThanTheTimeoutFailsTheFirstCollectiveInBound)
{
	// Node 3 starts its first collective 3 s after the others, with a 1 s
	// job timeout: the switch keeps the others waiting (not failing after
	// IBV_COLL_EMU_SW_CONFIG_MS), they fail by timeout after 1 s and tell
	// node 3, whose collective then fails at once.
	NodeSet r{4,
		  "1",
		  "swlate",
		  {"IBV_COLL_EMU_SW_CONFIG_MS=200"},
		  {"--topology", "1", "--leaves", "@0", "--timeout-ms", "1000", "--late", "3:3000"},
		  60,
		  "",
		  {""}};
	std::string logs, stats;
	std::vector<int> st = launch(r, &logs, &stats);
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	// The three that configured released the job as they left: the
	// switch forgot it then, not at its idle timeout.
	EXPECT_EQ(total_counter(stats, "releases"), 3u);
	EXPECT_EQ(stats.find("  job 42"), std::string::npos);
	std::cout << logs;
}

TEST(CollFailure, KilledMemberGivesEveryoneAnErrorWithinTheBound)
{
	// Node 2 of 4 dies 30 ms into a large allreduce; with a 1 s job
	// timeout every survivor must complete with TIMEOUT or REMOTE_ABORT
	// well within 3 s.
	NodeSet r{4, "1", "die", {}, {"--timeout-ms", "1000"}, 60, ""};
	std::string logs;
	auto t0 = std::chrono::steady_clock::now();
	std::vector<int> st = launch(r, &logs);
	auto dt = std::chrono::steady_clock::now() - t0;
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	EXPECT_LT(dt, std::chrono::seconds(8));
	std::cout << logs;
}

// Long-lived jobs: explicit MIDs 2^31 - 1 apart and across
// 2^32 - 1, the automatic MID wrapping to 1, with Seg units reused by
// messages far apart in MID space, round the ring and through one switch,
// a hierarchy and two planes; a far MID refused with EINVAL.
std::vector<NodeSet> mid_runs()
{
	const std::vector<std::string> small = {"--seg-count", "16", "--mtu", "5"};
	auto with = [&](std::vector<std::string> a) {
		a.insert(a.end(), small.begin(), small.end());
		return a;
	};
	std::vector<NodeSet> v;
	v.push_back({2, "1", "mids", {}, with({}), 60, "ring"});
	v.push_back({3, "2", "mids", {}, with({}), 60, "ring"});
	v.push_back({2,
		     "1",
		     "mids",
		     {},
		     with({"--topology", "1", "--leaves", "@0"}),
		     60,
		     "switch",
		     {""}});
	v.push_back({2,
		     "1",
		     "mids",
		     {},
		     with({"--topology", "2", "--leaves", "@0,@1", "--spines", "@2",
			   "--member-leaf", "0,1", "--expect-flags", "0xc00"}),
		     60,
		     "hier",
		     {"", "", ""}});
	v.push_back({2,
		     "1",
		     "mids",
		     {},
		     with({"--topology", "1", "--planes", "2", "--leaves", "@0,@1"}),
		     60,
		     "planes",
		     {"", ""}});
	return v;
}

class CollMid : public ::testing::TestWithParam<NodeSet> {};

TEST_P(CollMid, EveryNodeMatchesTheReference)
{
	const NodeSet &r = GetParam();
	std::string logs, stats;
	std::vector<int> st = launch(r, &logs, &stats);
	for (int i = 0; i < r.nodes; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	if (HasFailure())
		std::cout << logs;
}

INSTANTIATE_TEST_SUITE_P(Loopback, CollMid, ::testing::ValuesIn(mid_runs()), run_name);

// A job given again after a failure (long-lived jobs): node 0 pulls its
// buffers from under an allreduce; every member resets and installs the
// job again at its own pace, one of them 300 ms after the others, with no
// barrier, and the next collectives must succeed at once (no collective
// waits for the 4 s timeout), round the ring and through switches, with
// and without loss.  A member whose allreduce completed before node 0
// failed goes on in the old incarnation: its next collective must fail at
// once.
std::vector<NodeSet> recover_runs()
{
	const std::string loss = "IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=5";
	const std::string rto = "IBV_COLL_EMU_COLL_RTO_US=5000";
	const std::vector<std::string> base = {"--timeout-ms", "4000",	"--seg-count",
					       "16",	       "--mtu", "5"};
	auto with = [&](std::vector<std::string> a, const char *late) {
		a.insert(a.end(), base.begin(), base.end());
		a.push_back("--late");
		a.push_back(late);
		return a;
	};
	const std::vector<std::string> one = {"--topology", "1", "--leaves", "@0"};
	const std::vector<std::string> hier = {"--topology",	 "2",	 "--leaves",	  "@0,@1",
					       "--spines",	 "@2",	 "--member-leaf", "0,1,0",
					       "--expect-flags", "0xc00"};
	std::vector<NodeSet> v;
	v.push_back({2, "1", "recover", {}, with({}, "1:300:99"), 60, "ring"});
	v.push_back({2, "1", "recover", {loss, rto}, with({}, "0:300:99"), 60, "ring_loss"});
	v.push_back({2, "1", "recover", {}, with(one, "1:300:99"), 60, "switch_late1", {""}});
	v.push_back({2, "1", "recover", {}, with(one, "0:300:99"), 60, "switch_late0", {""}});
	v.push_back({3,
		     "1",
		     "recover",
		     {loss, rto},
		     with(one, "1:300:99"),
		     60,
		     "switch_loss",
		     {""},
		     {loss}});
	v.push_back({3,
		     "1",
		     "recover",
		     {loss, rto},
		     with(hier, "2:300:99"),
		     60,
		     "hier_loss",
		     {"", "", ""},
		     {loss}});
	// Node 0 moves its QP to ERR, which tells no one: the others learn it
	// from the new incarnation's packets (ring) or from the switch that
	// holds it, at once rather than at their timeout.
	v.push_back({2, "1", "recover_quiet", {}, with({}, "1:300:99"), 60, "ring"});
	v.push_back({3, "1", "recover_quiet", {}, with(one, "1:300:99"), 60, "switch", {""}});
	v.push_back({3,
		     "1",
		     "recover_quiet",
		     {loss, rto},
		     with(hier, "2:300:99"),
		     60,
		     "hier_loss",
		     {"", "", ""},
		     {loss}});
	v.push_back({2,
		     "1",
		     "recover",
		     {},
		     with({"--topology", "1", "--leaves", "@0", "--inline"}, "1:300:99"),
		     60,
		     "switch_inline",
		     {""}});
	// Node 0 alone moves to a new incarnation after a collective that
	// succeeded: the others' next collective fails at once, then they
	// follow.
	v.push_back({2, "1", "recover_one", {}, with({}, "1:300:99"), 60, "ring"});
	v.push_back({3, "1", "recover_one", {}, with(one, "2:300:99"), 60, "switch", {""}});
	v.push_back({3,
		     "1",
		     "recover_one",
		     {loss, rto},
		     with(hier, "1:300:99"),
		     60,
		     "hier_loss",
		     {"", "", ""},
		     {loss}});
	return v;
}

class CollRecover : public ::testing::TestWithParam<NodeSet> {};

TEST_P(CollRecover, JobGivenAgainWorksAtOnce)
{
	const NodeSet &r = GetParam();
	std::string logs, stats;
	auto t0 = std::chrono::steady_clock::now();
	std::vector<int> st = launch(r, &logs, &stats);
	auto dt = std::chrono::steady_clock::now() - t0;
	for (int i = 0; i < r.nodes; i++)
		EXPECT_EQ(st[size_t(i)], 0) << "node " << i;
	// No collective waited for its timeout: the failed one ends by ABORT,
	// the others succeed.
	EXPECT_LT(dt, std::chrono::seconds(10));
	// (Through switches the new incarnation usually replaces the old one
	// there, counted in "incarnations"; not always: when the old one never
	// reached a switch, the new one is simply a new job.)
	std::cout << "switches: incarnations " << total_counter(stats, "incarnations")
		  << ", drop_incarnation " << total_counter(stats, "drop_incarnation") << "\n";
	if (HasFailure())
		std::cout << logs;
	else
		std::cout << logs.substr(0, 3000);
}

INSTANTIATE_TEST_SUITE_P(Loopback, CollRecover, ::testing::ValuesIn(recover_runs()), run_name);

} // namespace
