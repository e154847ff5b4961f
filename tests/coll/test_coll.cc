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
};

std::string slurp(const std::string &path)
{
	std::ifstream f(path);
	std::stringstream ss;
	ss << f.rdbuf();
	return ss.str();
}

// Start every node, wait for all of them (killing the lot past the
// timeout), and return each node's exit status (-1: killed).
std::vector<int> launch(const NodeSet &r, std::string *logs)
{
	static int seq;
	std::string tag = std::to_string(getpid()) + "_" + std::to_string(seq++);
	std::string boot = "unix:/tmp/ibvc_coll_" + tag + ".sock";
	std::vector<pid_t> pids;
	std::vector<std::string> outs;
	for (int i = 0; i < r.nodes; i++) {
		std::vector<std::string> a = {COLL_NODE_PATH, "--boot", boot, "--node", std::to_string(i),
					      "--nodes", std::to_string(r.nodes), "--ranks", r.ranks,
					      "--scenario", r.scenario};
		a.insert(a.end(), r.args.begin(), r.args.end());
		std::vector<char *> argv;
		for (auto &s : a)
			argv.push_back(s.data());
		argv.push_back(nullptr);
		std::vector<std::string> env_s;
		for (char **e = environ; *e; e++)
			env_s.emplace_back(*e);
		env_s.insert(env_s.end(), r.env.begin(), r.env.end());
		std::vector<char *> envp;
		for (auto &s : env_s)
			envp.push_back(s.data());
		envp.push_back(nullptr);
		std::string out = "/tmp/ibvc_coll_" + tag + "_" + std::to_string(i) + ".log";
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
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
	while (left && std::chrono::steady_clock::now() < deadline) {
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
	v.push_back({4, "2", "big", {}, {"--mtu", "5"}, 300, ""});
	const std::string loss = "IBV_COLL_EMU_IMPAIR=drop=0.05,dup=0.05,reorder=0.05,seed=3";
	v.push_back({4, "2", "lossy", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, ""});
	v.push_back({3, "1", "lossy", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, ""});
	v.push_back({3, "2,1,3", "full", {loss, "IBV_COLL_EMU_COLL_RTO_US=5000"}, {}, 240, "lossy"});
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

} // namespace
