// The driver-side fixture of the multi-process RC tests.
#include "rc_fixture.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

extern char **environ;

namespace ibvc_test {

// The peer's path, kept whole in the binary (tests/rxe/run-rxe-vm.sh looks
// for it there; a literal used in place may be built from pieces).
[[gnu::used]] static const char kRcPeerPath[] = RC_PEER_PATH;

void RcFixture::start(const RcOptions &o, const std::vector<std::string> &peer_env,
		      const std::vector<std::string> &peer_args)
{
	static int seq;
	oob_path = "/tmp/ibvc_rc_" + std::to_string(getpid()) + "_" + std::to_string(seq++);
	ASSERT_EQ(oob.listen(oob_path), 0);

	std::vector<std::string> args;
	const char *ns = getenv("IBV_COLL_TEST_PEER_NETNS");
	if (ns && *ns)
		args = {"ip", "netns", "exec", ns};
	args.push_back(kRcPeerPath);
	args.insert(args.end(), {"--oob", oob_path, "--mtu", std::to_string(int(o.mtu)), "--size",
				 std::to_string(o.buf_size)});
	const char *pdev = getenv("IBV_COLL_TEST_PEER_DEV");
	if (pdev && *pdev)
		args.insert(args.end(), {"--dev", pdev});
	args.insert(args.end(), peer_args.begin(), peer_args.end());
	std::vector<char *> argv;
	for (auto &a : args)
		argv.push_back(a.data());
	argv.push_back(nullptr);
	// peer_env replaces what this process has of the same names (getenv
	// finds the first of two).
	std::vector<std::string> env_s;
	for (char **e = environ; *e; e++) {
		std::string v = *e;
		std::string name = v.substr(0, v.find('='));
		bool mine = false;
		for (const std::string &pe : peer_env)
			mine |= pe.substr(0, pe.find('=')) == name;
		if (!mine)
			env_s.push_back(std::move(v));
	}
	env_s.insert(env_s.end(), peer_env.begin(), peer_env.end());
	std::vector<char *> envp;
	for (auto &e : env_s)
		envp.push_back(e.data());
	envp.push_back(nullptr);
	ASSERT_EQ(posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()), 0);

	ASSERT_EQ(oob.accept(20000), 0) << "peer did not connect";
	ASSERT_EQ(ep.open(o), 0);
	PeerInfo mine = ep.info();
	ASSERT_EQ(oob.recv(&peer, sizeof(peer), 20000), 0);
	ASSERT_EQ(oob.send(&mine, sizeof(mine)), 0);
	ASSERT_EQ(ep.connect(peer), 0);
}

void RcFixture::TearDown()
{
	if (pid > 0) {
		Msg m{};
		m.cmd = kQuit;
		Reply r;
		if (!oob.send(&m, sizeof(m)))
			oob.recv(&r, sizeof(r), 5000);
		// Reap, with a bound: a peer that does not leave is killed.
		for (int i = 0; i < 500; i++) {
			int st;
			if (waitpid(pid, &st, WNOHANG) == pid) {
				pid = -1;
				return;
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
		kill_peer();
	}
}

void RcFixture::kill_peer()
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	pid = -1;
}

Reply RcFixture::cmd(Cmd c, uint64_t a, uint64_t b, uint64_t cc)
{
	Msg m{};
	m.cmd = c;
	m.a = a;
	m.b = b;
	m.c = cc;
	Reply r{};
	r.status = -1;
	EXPECT_EQ(oob.send(&m, sizeof(m)), 0);
	EXPECT_EQ(oob.recv(&r, sizeof(r), 60000), 0) << "peer did not answer";
	return r;
}

std::vector<Reply> RcFixture::wait_recv(uint64_t n, int timeout_ms)
{
	Msg m{};
	m.cmd = kWaitRecv;
	m.a = n;
	m.b = uint64_t(timeout_ms);
	EXPECT_EQ(oob.send(&m, sizeof(m)), 0);
	std::vector<Reply> out(n);
	for (auto &r : out)
		EXPECT_EQ(oob.recv(&r, sizeof(r), timeout_ms + 10000), 0);
	return out;
}

ibv_coll_wc RcFixture::next_wc(int timeout_ms)
{
	ibv_coll_wc wc{};
	EXPECT_EQ(ep.wait(&wc, timeout_ms), 0) << "no completion";
	return wc;
}

} // namespace ibvc_test
