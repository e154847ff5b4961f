/*
 * ibv_coll_run - start the processes of a program on this host as the
 * nodes of one ibv_coll job, and forward their output line by line.
 *
 * N nodes of P processes each (-p, default 1: one process per node).  Each
 * child gets IBVC_BOOT_ADDR/NODE/NODES (what ibvc_boot_from_env reads: its
 * place in the rendezvous, 0 to N*P-1, node by node), IBVC_JOB_NODE/NODES
 * and IBVC_LOCAL_PROC/PROCS (its node and its place among the node's
 * processes: what ibvc_boot_place reads) and IBVC_RANKS_PER_NODE (its own
 * local ranks).  With P > 1 the processes of a node share one device:
 * IBV_COLL_CRXE_SHARED=y unless the environment says otherwise.  Each
 * child runs in a process group of its own (so a signal
 * reaches whatever it starts), and writes into two pipes that are read with
 * poll(2); signals, including SIGCHLD, come through a signalfd in the same
 * poll set, so the launcher sleeps until something happens.
 */
#define _GNU_SOURCE
#include "ibvc_version.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "ibv_coll_run"
#define MAX_NODES 1024 /* processes in all */
#define MAX_PROCS 64   /* processes per node */
/* A line longer than this is forwarded in pieces, each with the prefix. */
#define LINE_MAX_BYTES 65536
/* After SIGTERM, how long children get before SIGKILL. */
#define KILL_AFTER_MS 2000

struct stream {
	int fd;	 /* our end of the pipe, -1 once closed */
	int out; /* where its lines go: 1 or 2 */
	char *buf;
	size_t len;
};

struct child {
	pid_t pid;
	int alive;
	struct stream s[2];
};

struct launcher {
	int n, k;
	int nodes, procs; /* -n, -p: n = nodes * procs processes */
	double timeout_s, grace_s;
	char boot[128];
	char boot_dir[64]; /* the default rendezvous's private directory, or "" */
	char **argv;
	struct child *ch;
	int sfd;
	int alive;
	int result;	  /* the exit status to return; -1 while every child did well */
	int64_t deadline; /* --timeout, in now_ms() time; 0: none */
	int64_t term_at;  /* when to SIGTERM the rest; 0: not scheduled */
	int64_t kill_at;  /* when to SIGKILL the rest; 0: not scheduled */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " -n N [-p P] [-k RANKS] [--boot ADDR] [--timeout SEC] "
		"[--grace SEC] -- PROGRAM [ARGS...]\n"
		"  -n, --nodes N          nodes of the job, 1 to %d (N x P processes at most)\n"
		"  -p, --procs-per-node P processes per node, 1 to %d (default 1); they share\n"
		"                         one device (IBV_COLL_CRXE_SHARED=y unless set)\n"
		"  -k, --ranks-per-node K local ranks of each process: IBVC_RANKS_PER_NODE\n"
		"                         (default: the variable in this environment, else 1)\n"
		"  -b, --boot ADDR        IBVC_BOOT_ADDR: unix:/path (default: a socket in a\n"
		"                         private directory of $TMPDIR, removed at the end)\n"
		"  --timeout SEC          kill everything after SEC seconds and exit 124\n"
		"  --grace SEC            after a child fails, wait SEC seconds before\n"
		"                         terminating the others (default 1)\n"
		"  -V, --version          print the version and exit\n"
		"  -h, --help             this text\n",
		MAX_NODES, MAX_PROCS);
}

/* Write all of p, giving up quietly when the reader has gone (EPIPE). */
static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += r;
		n -= (size_t)r;
	}
}

/* One line (without its newline) with the prefix, in one write, so that
 * lines of different children never mix. */
static void emit(int node, int out, const char *line, size_t len)
{
	char stackbuf[4096], *b = stackbuf;
	size_t need = len + 32;
	if (need > sizeof(stackbuf) && !(b = malloc(need)))
		return;
	int p = snprintf(b, 32, "[%d] ", node);
	memcpy(b + p, line, len);
	b[(size_t)p + len] = '\n';
	write_all(out, b, (size_t)p + len + 1);
	if (b != stackbuf)
		free(b);
}

/* Forward the complete lines in s->buf; with flush, the rest too. */
static void forward_lines(int node, struct stream *s, int flush)
{
	size_t start = 0;
	for (;;) {
		char *nl = memchr(s->buf + start, '\n', s->len - start);
		if (!nl)
			break;
		emit(node, s->out, s->buf + start, (size_t)(nl - (s->buf + start)));
		start = (size_t)(nl - s->buf) + 1;
	}
	if (s->len - start >= LINE_MAX_BYTES || (flush && s->len > start)) {
		emit(node, s->out, s->buf + start, s->len - start);
		start = s->len;
	}
	memmove(s->buf, s->buf + start, s->len - start);
	s->len -= start;
}

static void close_stream(int node, struct stream *s)
{
	forward_lines(node, s, 1);
	close(s->fd);
	s->fd = -1;
}

/* Read what the pipe has now; close it at end of file. */
static void read_stream(int node, struct stream *s)
{
	while (s->fd >= 0) {
		ssize_t r = read(s->fd, s->buf + s->len, LINE_MAX_BYTES - s->len);
		if (r > 0) {
			s->len += (size_t)r;
			forward_lines(node, s, 0);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		close_stream(node, s); /* end of file, or an error */
	}
}

/* A port nobody listens on now: node 0 binds it a moment later (there is a
 * small window in which another program could take it). */
/* The default rendezvous's directory goes with us (node 0 unlinks the
 * socket when it closes; if it died, we do). */
static void drop_boot_dir(const struct launcher *l)
{
	if (!l->boot_dir[0])
		return;
	unlink(l->boot + 5);
	rmdir(l->boot_dir);
}

static void signal_children(struct launcher *l, int sig)
{
	for (int i = 0; i < l->n; i++)
		if (l->ch[i].alive && kill(-l->ch[i].pid, sig) && errno == ESRCH)
			kill(l->ch[i].pid, sig); /* not yet its own group leader */
}

static void setenv_int(const char *name, int v)
{
	char b[16];
	snprintf(b, sizeof(b), "%d", v);
	setenv(name, b, 1);
}

/* In the child: become process i (local process i % procs of node
 * i / procs) and run the program; never returns. */
static void exec_child(const struct launcher *l, int i, const sigset_t *oldmask, int out[2][2])
{
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	setpgid(0, 0);
	signal(SIGPIPE, SIG_DFL); /* an ignored signal would stay ignored across exec */
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	if (devnull >= 0)
		dup2(devnull, 0);
	dup2(out[0][1], 1);
	dup2(out[1][1], 2);
	setenv("IBVC_BOOT_ADDR", l->boot, 1);
	setenv_int("IBVC_BOOT_NODE", i);
	setenv_int("IBVC_BOOT_NODES", l->n);
	setenv_int("IBVC_JOB_NODE", i / l->procs);
	setenv_int("IBVC_JOB_NODES", l->nodes);
	setenv_int("IBVC_LOCAL_PROC", i % l->procs);
	setenv_int("IBVC_LOCAL_PROCS", l->procs);
	setenv_int("IBVC_RANKS_PER_NODE", l->k);
	/* The processes of a node reach one device only if they share it;
	 * a value the user gave (even n) stays. */
	if (l->procs > 1)
		setenv("IBV_COLL_CRXE_SHARED", "y", 0);
	execvp(l->argv[0], l->argv);
	fprintf(stderr, PROG ": cannot run %s: %s\n", l->argv[0], strerror(errno));
	_exit(127);
}

static int start_children(struct launcher *l, const sigset_t *oldmask)
{
	for (int i = 0; i < l->n; i++) {
		struct child *c = &l->ch[i];
		int out[2][2];
		if (pipe2(out[0], O_CLOEXEC) || pipe2(out[1], O_CLOEXEC)) {
			fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
			return -1;
		}
		fflush(NULL);
		c->pid = fork();
		if (c->pid < 0) {
			fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
			return -1;
		}
		if (c->pid == 0)
			exec_child(l, i, oldmask, out);
		setpgid(c->pid, c->pid); /* also here, so that kill(-pid) works at once */
		c->alive = 1;
		l->alive++;
		for (int j = 0; j < 2; j++) {
			close(out[j][1]);
			c->s[j].fd = out[j][0];
			c->s[j].out = j + 1;
			fcntl(c->s[j].fd, F_SETFL, O_NONBLOCK);
		}
	}
	return 0;
}

static int node_of(const struct launcher *l, pid_t pid)
{
	for (int i = 0; i < l->n; i++)
		if (l->ch[i].pid == pid)
			return i;
	return -1;
}

/* Collect every child that has ended; the first failure sets the exit
 * status and schedules the end of the others. */
static void reap(struct launcher *l)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		int i = node_of(l, pid);
		if (i < 0 || !l->ch[i].alive)
			continue;
		l->ch[i].alive = 0;
		l->alive--;
		/* Its last words first, then ours about it. */
		read_stream(i, &l->ch[i].s[0]);
		read_stream(i, &l->ch[i].s[1]);
		int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (code == 0 || l->result >= 0)
			continue;
		l->result = code;
		char who[48];
		if (l->procs > 1)
			snprintf(who, sizeof(who), "process %d (node %d)", i, i / l->procs);
		else
			snprintf(who, sizeof(who), "node %d", i);
		if (WIFEXITED(st))
			fprintf(stderr, PROG ": %s (pid %d) exited with status %d", who, (int)pid,
				code);
		else
			fprintf(stderr, PROG ": %s (pid %d) was killed by signal %d (%s)", who,
				(int)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
		/* Unless they are being ended already (a signal, the timeout). */
		if (l->alive && !l->term_at && !l->kill_at) {
			fprintf(stderr, "; terminating the other %d in %g s", l->alive, l->grace_s);
			l->term_at = now_ms() + (int64_t)(l->grace_s * 1000);
		}
		fputc('\n', stderr);
	}
}

static void handle_signals(struct launcher *l)
{
	struct signalfd_siginfo si;
	while (read(l->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGCHLD) {
			reap(l);
			continue;
		}
		/* SIGINT, SIGTERM, SIGHUP, SIGQUIT: pass it on, and make sure
		 * nothing outlives us for long if a child ignores it. */
		signal_children(l, (int)si.ssi_signo);
		if (!l->kill_at)
			l->kill_at = now_ms() + KILL_AFTER_MS + (int64_t)(l->grace_s * 1000);
	}
}

static void handle_timers(struct launcher *l)
{
	int64_t t = now_ms();
	if (l->deadline && t >= l->deadline) {
		fprintf(stderr, PROG ": timeout: %g s passed, killing %d of %d processes\n",
			l->timeout_s, l->alive, l->n);
		l->deadline = 0;
		l->result = 124;
		signal_children(l, SIGTERM);
		l->term_at = 0;
		l->kill_at = t + KILL_AFTER_MS;
	}
	if (l->term_at && t >= l->term_at) {
		signal_children(l, SIGTERM);
		l->term_at = 0;
		l->kill_at = t + KILL_AFTER_MS;
	}
	if (l->kill_at && t >= l->kill_at) {
		fprintf(stderr, PROG ": killing %d processes that did not end\n", l->alive);
		signal_children(l, SIGKILL);
		l->kill_at = 0;
	}
}

static int poll_timeout(const struct launcher *l)
{
	int64_t next = INT64_MAX, t = now_ms();
	if (l->deadline)
		next = l->deadline;
	if (l->term_at && l->term_at < next)
		next = l->term_at;
	if (l->kill_at && l->kill_at < next)
		next = l->kill_at;
	if (next == INT64_MAX)
		return -1;
	return next <= t ? 0 : (int)(next - t > 60000 ? 60000 : next - t);
}

static void run(struct launcher *l)
{
	struct pollfd *p = calloc((size_t)(2 * l->n + 1), sizeof(*p));
	if (!p) {
		fprintf(stderr, PROG ": out of memory\n");
		signal_children(l, SIGKILL);
		l->result = 1;
	}
	while (p && l->alive) {
		int np = 0;
		p[np++] = (struct pollfd){l->sfd, POLLIN, 0};
		for (int i = 0; i < l->n; i++)
			for (int j = 0; j < 2; j++)
				if (l->ch[i].s[j].fd >= 0)
					p[np++] = (struct pollfd){l->ch[i].s[j].fd, POLLIN, 0};
		if (poll(p, (nfds_t)np, poll_timeout(l)) < 0 && errno != EINTR) {
			fprintf(stderr, PROG ": poll: %s\n", strerror(errno));
			break;
		}
		for (int i = 0; i < l->n; i++)
			for (int j = 0; j < 2; j++)
				read_stream(i, &l->ch[i].s[j]);
		handle_signals(l);
		handle_timers(l);
	}
	free(p);
	/* Every child has ended: what they wrote is in the pipes.  Whatever
	 * they left running may hold the pipes open; we do not wait for it. */
	for (int i = 0; i < l->n; i++)
		for (int j = 0; j < 2; j++)
			if (l->ch[i].s[j].fd >= 0) {
				read_stream(i, &l->ch[i].s[j]);
				if (l->ch[i].s[j].fd >= 0)
					close_stream(i, &l->ch[i].s[j]);
			}
}

static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !(v >= 0) || v > 1e7)
		return -1;
	*out = v;
	return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (end == s || *end || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

/* The rendezvous address: the one given, or a Unix socket in a directory
 * only we can enter (the job's processes are on this host, network
 * namespaces of it too).  0, or -1 after a message. */
static int make_boot(struct launcher *l, const char *boot)
{
	if (boot) {
		if (strlen(boot) >= sizeof(l->boot)) {
			fprintf(stderr, PROG ": --boot address too long\n");
			return -1;
		}
		strcpy(l->boot, boot);
		return 0;
	}
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) > 40)
		tmp = "/tmp";
	snprintf(l->boot_dir, sizeof(l->boot_dir), "%s/ibv_coll_run.XXXXXX", tmp);
	if (!mkdtemp(l->boot_dir)) {
		fprintf(stderr, PROG ": cannot make a directory in %s: %s\n", tmp, strerror(errno));
		return -1;
	}
	snprintf(l->boot, sizeof(l->boot), "unix:%s/boot.sock", l->boot_dir);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"nodes", 1, NULL, 'n'},
		{"ranks-per-node", 1, NULL, 'k'},
		{"procs-per-node", 1, NULL, 'p'},
		{"boot", 1, NULL, 'b'},
		{"timeout", 1, NULL, 'T'},
		{"grace", 1, NULL, 'G'},
		{"help", 0, NULL, 'h'},
		{"version", 0, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct launcher l = {.n = 0, .k = 1, .procs = 1, .grace_s = 1.0, .sfd = -1, .result = -1};
	const char *boot = NULL, *env_k = getenv("IBVC_RANKS_PER_NODE");
	int c;
	if (env_k && parse_int(env_k, 1, 64, &l.k)) {
		fprintf(stderr, PROG ": IBVC_RANKS_PER_NODE=%s: not a number from 1 to 64\n",
			env_k);
		return 2;
	}
	/* '+': stop at the program's name, so its options stay its own. */
	while ((c = getopt_long(argc, argv, "+n:p:k:b:hV", lo, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 'n': bad = parse_int(optarg, 1, MAX_NODES, &l.nodes); break;
		case 'p': bad = parse_int(optarg, 1, MAX_PROCS, &l.procs); break;
		case 'k': bad = parse_int(optarg, 1, 64, &l.k); break;
		case 'b': boot = optarg; break;
		case 'T': bad = parse_seconds(optarg, &l.timeout_s); break;
		case 'G': bad = parse_seconds(optarg, &l.grace_s); break;
		case 'h': usage(stdout); return 0;
		case 'V': return ibvc_print_version(PROG, NULL);
		default: usage(stderr); return 2;
		}
		if (bad) {
			const char *name = "?";
			for (const struct option *o = lo; o->name; o++)
				if (o->val == c)
					name = o->name;
			fprintf(stderr, PROG ": bad value for --%s: %s\n", name, optarg);
			usage(stderr);
			return 2;
		}
	}
	if (l.nodes < 1 || optind >= argc) {
		fprintf(stderr, PROG ": %s\n",
			l.nodes < 1 ? "-n N is required" : "no program given");
		usage(stderr);
		return 2;
	}
	if (l.nodes * l.procs > MAX_NODES) {
		fprintf(stderr, PROG ": -n %d -p %d: %d processes, more than %d\n", l.nodes,
			l.procs, l.nodes * l.procs, MAX_NODES);
		return 2;
	}
	l.n = l.nodes * l.procs;
	l.argv = argv + optind;
	if (make_boot(&l, boot))
		return boot ? 2 : 1;

	/* Signals arrive through the signalfd; blocked before the first fork so
	 * that no SIGCHLD is missed, and unblocked in each child. */
	static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	sigset_t mask, oldmask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
		/* One we were told to ignore (nohup, a background job) stays
		 * ignored, here and in the children. */
		struct sigaction sa;
		if (!sigaction(forwarded[i], NULL, &sa) && sa.sa_handler != SIG_IGN)
			sigaddset(&mask, forwarded[i]);
	}
	sigprocmask(SIG_BLOCK, &mask, &oldmask);
	signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
	l.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (l.sfd < 0) {
		fprintf(stderr, PROG ": signalfd: %s\n", strerror(errno));
		drop_boot_dir(&l);
		return 1;
	}
	int nomem = !(l.ch = calloc((size_t)l.n, sizeof(*l.ch)));
	for (int i = 0; !nomem && i < l.n; i++)
		for (int j = 0; j < 2; j++) {
			l.ch[i].s[j].fd = -1;
			nomem |= !(l.ch[i].s[j].buf = malloc(LINE_MAX_BYTES));
		}
	if (nomem) {
		fprintf(stderr, PROG ": out of memory\n");
		drop_boot_dir(&l);
		return 1;
	}
	if (l.timeout_s > 0)
		l.deadline = now_ms() + (int64_t)(l.timeout_s * 1000);
	/* The children's stderr is a pipe to us: tell them whether what we
	 * copy it to is a terminal (ibv_coll_perf then shows its progress). */
	setenv("IBVC_RUN_STDERR_TTY", isatty(2) ? "1" : "0", 1);
	if (start_children(&l, &oldmask)) {
		l.result = 1;
		signal_children(&l, SIGKILL);
	}
	run(&l);
	for (int i = 0; i < l.n; i++)
		for (int j = 0; j < 2; j++)
			free(l.ch[i].s[j].buf);
	free(l.ch);
	close(l.sfd);
	drop_boot_dir(&l);
	return l.result >= 0 ? l.result : 0;
}
