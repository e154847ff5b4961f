// ibv_coll_switchd as a child process on an ephemeral loopback port, for
// a test's life (the program's path from the test's environment or build).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

namespace ibvc_test {

// port() is 0 when it did not start.
class Switchd {
public:
	explicit Switchd(const char *prog)
	{
		char dir[] = "/tmp/ivcsw.XXXXXX";
		if (!mkdtemp(dir))
			return;
		dir_ = dir;
		const std::string port_file = dir_ + "/port";
		pid_ = fork();
		if (pid_ == 0) {
			execl(prog, prog, "-p", "0", "-P", port_file.c_str(), (char *)nullptr);
			_exit(127);
		}
		for (int i = 0; i < 100 && !port_; i++) {
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			if (FILE *f = fopen(port_file.c_str(), "r")) {
				unsigned p = 0;
				if (fscanf(f, "%u", &p) == 1)
					port_ = uint16_t(p);
				fclose(f);
			}
		}
	}
	~Switchd()
	{
		if (pid_ > 0) {
			kill(pid_, SIGTERM);
			waitpid(pid_, nullptr, 0);
		}
		if (!dir_.empty()) {
			unlink((dir_ + "/port").c_str());
			rmdir(dir_.c_str());
		}
	}
	uint16_t port() const { return port_; }

private:
	pid_t pid_ = -1;
	uint16_t port_ = 0;
	std::string dir_;
};

} // namespace ibvc_test
