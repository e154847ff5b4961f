// The passive side of the multi-process RC tests: a separate process (in
// another network namespace when asked) that owns a QP and a buffer and
// obeys commands on the out-of-band socket.  It checks received data
// against the pattern itself, so the driver never trusts its own copy.
#include "oob.h"
#include "pattern.h"
#include "rc_endpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <getopt.h>
#include <string>

using namespace ibvc_test;

int main(int argc, char **argv)
{
	std::string oob_path;
	RcOptions o;
	static const option opts[] = {
		{"oob", required_argument, nullptr, 'o'},
		{"dev", required_argument, nullptr, 'd'},
		{"mtu", required_argument, nullptr, 'm'},
		{"size", required_argument, nullptr, 's'},
		{"gid", required_argument, nullptr, 'g'},
		{"rnr-timer", required_argument, nullptr, 'r'},
		{nullptr, 0, nullptr, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "o:d:m:s:g:r:", opts, nullptr)) != -1) {
		switch (c) {
		case 'o': oob_path = optarg; break;
		case 'd': o.dev = optarg; break;
		case 'm': o.mtu = ibv_mtu(atoi(optarg)); break;
		case 's': o.buf_size = strtoull(optarg, nullptr, 0); break;
		case 'g': o.gid_index = atoi(optarg); break;
		case 'r': o.min_rnr_timer = uint8_t(atoi(optarg)); break;
		default: return 2;
		}
	}
	Oob oob;
	if (int err = oob.connect(oob_path, 10000)) {
		fprintf(stderr, "rc_peer: connect %s: %s\n", oob_path.c_str(), strerror(err));
		return 1;
	}
	RcEndpoint ep;
	int err = ep.open(o);
	if (err) {
		fprintf(stderr, "rc_peer: open: %s\n", strerror(err));
		return 1;
	}
	PeerInfo mine = ep.info(), theirs;
	if (oob.send(&mine, sizeof(mine)) || oob.recv(&theirs, sizeof(theirs), 30000))
		return 1;
	if ((err = ep.connect(theirs))) {
		fprintf(stderr, "rc_peer: connect qp: %s\n", strerror(err));
		return 1;
	}
	for (;;) {
		Msg m;
		if (oob.recv(&m, sizeof(m), 120000))
			return 1;
		Reply r{};
		switch (m.cmd) {
		case kPostRecv:
			for (uint64_t i = 0; i < m.a && !r.status; i++)
				r.status = ep.post_recv(m.c + i * m.b, uint32_t(m.b), i);
			break;
		case kWaitRecv:
			for (uint64_t i = 0; i < m.a; i++) {
				ibv_coll_wc wc;
				Reply w{};
				int e = ep.wait(&wc, int(m.b));
				if (e) {
					w.status = e;
				} else {
					w.status = wc.status == IBV_WC_SUCCESS ? 0
									       : 1000 + wc.status;
					w.opcode = wc.opcode;
					w.a = wc.byte_len;
					w.b = wc.wr_id;
					w.imm = wc.imm_data;
					w.wc_flags = wc.wc_flags;
				}
				if (oob.send(&w, sizeof(w)))
					return 1;
			}
			continue;
		case kFill: fill_pattern(ep.buf + m.b, m.c, m.a); break;
		case kCheck:
			r.a = check_pattern(ep.buf + m.b, m.c, m.a);
			r.status = r.a == SIZE_MAX ? 0 : EIO;
			break;
		case kZero: memset(ep.buf + m.b, 0, m.c); break;
		case kQuit: oob.send(&r, sizeof(r)); return 0;
		default: r.status = EINVAL;
		}
		if (oob.send(&r, sizeof(r)))
			return 1;
	}
}
