// ibv_coll_devd: the shared crxe device of a netdev as a program, one NIC
// for every process of the host that opens it.  See ibv_coll_devd(8).
#include "crxe.h"
#include "devd/devd_server.h"
#include "ibvc_version.h"
#include "util/log.h"

#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>

using namespace ibv_coll;

namespace {

devd::Server *g_server;

void on_signal(int)
{
	if (g_server)
		g_server->stop();
}

// The NIC's engine met an internal error (NicParams::on_fatal): the
// daemon stops, and its clients, whose channel closes, fail their
// devices with IBV_EVENT_DEVICE_FATAL.
std::atomic<bool> g_nic_failed{false};
void on_nic_fatal(void *)
{
	g_nic_failed = true;
	if (g_server)
		g_server->stop();
}

void usage(FILE *f)
{
	fprintf(f, "usage: ibv_coll_devd [--exit-idle] [--ready-fd FD] NETDEV\n"
		   "       ibv_coll_devd --version\n"
		   "Serve the emulated RoCEv2 device crxe_NETDEV to every process of this host\n"
		   "that opens it with IBV_COLL_CRXE_SHARED=1.\n"
		   "  -x, --exit-idle    exit when the last client has gone\n"
		   "  -r, --ready-fd FD  write a byte to FD and close it once serving\n"
		   "  -h, --help         this text\n"
		   "  -V, --version      print the version and exit\n");
}

} // namespace

int main(int argc, char **argv)
{
	static const option opts[] = {{"exit-idle", no_argument, nullptr, 'x'},
				      {"ready-fd", required_argument, nullptr, 'r'},
				      {"help", no_argument, nullptr, 'h'},
				      {"version", no_argument, nullptr, 'V'},
				      {nullptr, 0, nullptr, 0}};
	devd::ServerOptions o;
	int c, ready_fd = -1;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "xr:hV", opts, nullptr)) != -1) {
		switch (c) {
		case 'x': o.exit_idle = true; break;
		case 'r':
			if (!util::parse_uint(optarg, &v) || v > INT_MAX) {
				fprintf(stderr,
					"ibv_coll_devd: --ready-fd '%s': not a descriptor\n",
					optarg);
				return 2;
			}
			ready_fd = int(v);
			break;
		case 'h': usage(stdout); return 0;
		case 'V': return ibvc_print_version("ibv_coll_devd", nullptr);
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		return 2;
	}
	std::string netdev = argv[optind];
	if (netdev.rfind("crxe_", 0) == 0)
		netdev = netdev.substr(5);

	emu::NicParams p;
	int err = crxe::nic_params(netdev, &p);
	if (err) {
		fprintf(stderr, "ibv_coll_devd: %s: %s\n", netdev.c_str(), strerror(err));
		return 1;
	}
	p.on_fatal = on_nic_fatal;
	std::unique_ptr<emu::Nic> nic;
	if ((err = emu::Nic::create(p, &nic))) {
		fprintf(stderr, "ibv_coll_devd: %s: %s\n", p.name.c_str(), strerror(err));
		return 1;
	}
	std::unique_ptr<devd::Server> s;
	if ((err = devd::Server::create(p.name, std::move(nic), o, &s))) {
		// Started on a first open (--exit-idle) and beaten by another
		// process's first open: that daemon serves, nothing went wrong.
		if (err != EADDRINUSE || !o.exit_idle)
			fprintf(stderr, "ibv_coll_devd: %s: %s%s\n", p.name.c_str(), strerror(err),
				err == EADDRINUSE ? " (another ibv_coll_devd serves it)" : "");
		return err == EADDRINUSE ? 3 : 1;
	}
	// Serving (the socket listens): the starter waits for this word, and
	// tells a daemon that serves from one that exited (EOF, no byte).
	if (ready_fd >= 0) {
		if (write(ready_fd, "1", 1) < 0) {
			// The starter is gone: nobody to tell.
		}
		close(ready_fd);
	}
	g_server = s.get();
	struct sigaction sa {};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, nullptr);
	sigaction(SIGTERM, &sa, nullptr);
	signal(SIGPIPE, SIG_IGN);
	if (g_nic_failed) // before the server was there to stop
		s->stop();
	err = s->run();
	g_server = nullptr;
	if (g_nic_failed)
		fprintf(stderr, "ibv_coll_devd: %s: the device failed (internal error)\n",
			p.name.c_str());
	return err || g_nic_failed ? 1 : 0;
}
