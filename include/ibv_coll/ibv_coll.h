/*
 * ibv_coll - libibverbs-style verbs with collective offload.
 *
 * Every function is the libibverbs verb with "coll_" before its object
 * (ibv_reg_mr -> ibv_reg_coll_mr).  Plain value types that libibverbs
 * defines well (struct ibv_sge, enum ibv_wc_status, enum ibv_access_flags,
 * enum ibv_qp_state, enum ibv_mtu, enum ibv_port_state, union ibv_gid) are
 * reused from <infiniband/verbs.h>.
 *
 * Errors: calls returning a pointer give NULL and set errno; calls returning
 * int give 0 or a positive errno value; ibv_poll_coll_cq() gives a count or
 * a negative value.  A call that fails changes nothing.
 *
 * Fields are never reordered.  Input structs that carry comp_mask may gain
 * fields at the end, used only when a comp_mask bit says so.  Output structs
 * are written at the size this library was built with: build against a
 * header at least as new as the library you run with.
 */
#ifndef IBV_COLL_IBV_COLL_H
#define IBV_COLL_IBV_COLL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The RoCEv2 UDP destination port (IANA). */
#define IBV_COLL_ROCE_UDP_PORT 4791

/* ------------------------------------------------------------------ */
/* Devices and contexts                                                */
/* ------------------------------------------------------------------ */

/* Opaque: one per device a provider found (crxe: one per netdev). */
struct ibv_coll_device;

struct ibv_coll_context {
	struct ibv_coll_device *device;
	int num_comp_vectors;
	/* Readable while an async event waits (ibv_get_coll_async_event());
	 * works with poll/epoll.  Since 1.2. */
	int async_fd;
};

struct ibv_coll_device_attr {
	uint64_t comp_mask;
	char fw_ver[64];
	uint64_t node_guid;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	uint8_t phys_port_cnt;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t max_qp;
	uint32_t max_qp_wr;
	uint32_t max_sge;
	uint32_t max_cq;
	uint32_t max_cqe;
	uint32_t max_mr;
	uint32_t max_pd;
	uint32_t max_qp_rd_atom;
	uint32_t max_qp_init_rd_atom;
	uint32_t max_msg_sz;
};

struct ibv_coll_port_attr {
	uint64_t comp_mask;
	enum ibv_port_state state;
	enum ibv_mtu max_mtu;
	enum ibv_mtu active_mtu;
	int gid_tbl_len;
	uint32_t max_msg_sz;
	uint8_t link_layer;  /* IBV_LINK_LAYER_ETHERNET */
	uint16_t udp_port;   /* UDP port this context receives on (host order) */
	uint32_t netdev_mtu; /* the bound netdev's MTU in bytes */
	char netdev[16];     /* the bound netdev's name */
};

struct ibv_coll_device **ibv_get_coll_device_list(int *num_devices);
void ibv_free_coll_device_list(struct ibv_coll_device **list);
const char *ibv_get_coll_device_name(struct ibv_coll_device *device);
struct ibv_coll_context *ibv_open_coll_device(struct ibv_coll_device *device);
int ibv_close_coll_device(struct ibv_coll_context *context);
int ibv_query_coll_device(struct ibv_coll_context *context,
			  struct ibv_coll_device_attr *device_attr);
int ibv_query_coll_port(struct ibv_coll_context *context, uint8_t port_num,
			struct ibv_coll_port_attr *port_attr);
/* GID table: the port's netdev addresses, IPv4 ones first and mapped
 * (::ffff:a.b.c.d), then IPv6 ones except link-local. */
int ibv_query_coll_gid(struct ibv_coll_context *context, uint8_t port_num, int index,
		       union ibv_gid *gid);

/* Asynchronous events, as libibverbs' ibv_async_event: the event types
 * are enum ibv_event_type's.  Delivered: IBV_EVENT_DEVICE_FATAL (a shared
 * crxe device's daemon died; a real device failed or went away) and, for
 * libibverbs devices, the port events (element.port_num). */
struct ibv_coll_cq;
struct ibv_coll_qp;
struct ibv_coll_async_event {
	union {
		struct ibv_coll_cq *cq;
		struct ibv_coll_qp *qp;
		int port_num;
	} element;
	enum ibv_event_type event_type;
};

/* Blocks until an event waits on context->async_fd (EAGAIN instead when
 * the application made that fd non-blocking). */
int ibv_get_coll_async_event(struct ibv_coll_context *context, struct ibv_coll_async_event *event);
void ibv_ack_coll_async_event(struct ibv_coll_async_event *event);

/* ------------------------------------------------------------------ */
/* Protection domains and memory regions                               */
/* ------------------------------------------------------------------ */

struct ibv_coll_pd {
	struct ibv_coll_context *context;
	uint32_t handle;
};

struct ibv_coll_mr {
	struct ibv_coll_context *context;
	struct ibv_coll_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

struct ibv_coll_pd *ibv_alloc_coll_pd(struct ibv_coll_context *context);
int ibv_dealloc_coll_pd(struct ibv_coll_pd *pd);
/* access: enum ibv_access_flags (LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ). */
struct ibv_coll_mr *ibv_reg_coll_mr(struct ibv_coll_pd *pd, void *addr, size_t length, int access);
int ibv_dereg_coll_mr(struct ibv_coll_mr *mr);

/* ------------------------------------------------------------------ */
/* Completion channels and completion queues                          */
/* ------------------------------------------------------------------ */

struct ibv_coll_comp_channel {
	struct ibv_coll_context *context;
	int fd; /* readable when an event waits; works with poll/epoll */
};

struct ibv_coll_cq {
	struct ibv_coll_context *context;
	struct ibv_coll_comp_channel *channel;
	void *cq_context;
	uint32_t handle;
	int cqe;
};

enum ibv_coll_wc_opcode {
	IBV_COLL_WC_SEND = 0,
	IBV_COLL_WC_RDMA_WRITE = 1,
	IBV_COLL_WC_RDMA_READ = 2,
	/* Collective completions carry the WR's opcode value. */
	IBV_COLL_WC_ALLREDUCE = 0x40,
	IBV_COLL_WC_REDUCE = 0x41,
	IBV_COLL_WC_BCAST = 0x42,
	IBV_COLL_WC_ALLGATHER = 0x43,
	IBV_COLL_WC_REDUCE_SCATTER = 0x44,
	IBV_COLL_WC_BARRIER = 0x45,
	IBV_COLL_WC_QUERY = 0x46,
	/* Receive completions: test with (opcode & IBV_COLL_WC_RECV). */
	IBV_COLL_WC_RECV = 1 << 7,
	IBV_COLL_WC_RECV_RDMA_WITH_IMM = (1 << 7) + 1
};

enum ibv_coll_wc_flags {
	IBV_COLL_WC_WITH_IMM = 1 << 1,
	/* How a collective ran (one of these is set on its completion). */
	IBV_COLL_WC_LOCAL = 1 << 8,	 /* one node: reduced inside the NIC only */
	IBV_COLL_WC_RING = 1 << 9,	 /* NIC ring between the member NICs */
	IBV_COLL_WC_SWITCH = 1 << 10,	 /* aggregated in a switch */
	IBV_COLL_WC_HIERARCHY = 1 << 11, /* leaf switches under a spine */
	IBV_COLL_WC_FALLBACK = 1 << 12,	 /* the switch could not serve: ran the ring */
	/* Why (with IBV_COLL_WC_FALLBACK; none set: no switch answered). */
	IBV_COLL_WC_FALLBACK_BUSY = 1 << 13,   /* another job's message held the pool */
	IBV_COLL_WC_FALLBACK_SCORED = 1 << 14, /* another job's message scored higher */
	IBV_COLL_WC_FALLBACK_REFUSED = 1 << 15 /* the switch refused the job */
};

/* Collective outcome, beside the libibverbs status it maps to. */
enum ibv_coll_status {
	IBV_COLL_STATUS_SUCCESS = 0,
	IBV_COLL_STATUS_BUFFER_ERR = 1, /* Seg units held by another job (IBV_WC_LOC_LEN_ERR) */
	IBV_COLL_STATUS_TIMEOUT =
		2, /* no progress within the job's timeout (IBV_WC_RESP_TIMEOUT_ERR) */
	IBV_COLL_STATUS_REMOTE_ABORT = 3, /* another member failed it (IBV_WC_REM_ABORT_ERR) */
	IBV_COLL_STATUS_DENIED = 4,	  /* the switch refused the job (IBV_WC_REM_ACCESS_ERR) */
	IBV_COLL_STATUS_LOCAL_ERR =
		5,		    /* a local buffer became inaccessible (IBV_WC_LOC_PROT_ERR) */
	IBV_COLL_STATUS_FLUSHED = 6 /* not run: the QP was in error (IBV_WC_WR_FLUSH_ERR) */
};

/* What IBV_COLL_WR_QUERY found out about a message. */
enum ibv_coll_msg_state {
	IBV_COLL_MSG_UNKNOWN = 0, /* never posted on this QP, or forgotten */
	IBV_COLL_MSG_QUEUED = 1,  /* posted, waiting for earlier messages */
	IBV_COLL_MSG_ACTIVE = 2,  /* running: see blocks_done / blocks_total */
	IBV_COLL_MSG_DONE = 3,	  /* completed successfully */
	IBV_COLL_MSG_FAILED = 4
};

struct ibv_coll_wc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_coll_wc_opcode opcode;
	uint32_t vendor_err;
	uint32_t byte_len; /* collectives: count times the element size */
	uint32_t imm_data; /* network byte order, as sent */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	/* Collective completions only. */
	uint32_t jid;
	uint32_t mid;
	enum ibv_coll_status coll_status;
	enum ibv_coll_msg_state msg_state; /* QUERY: the queried message's state */
	uint32_t blocks_done;		   /* QUERY: its data blocks complete here */
	uint32_t blocks_total;
};

struct ibv_coll_comp_channel *ibv_create_coll_comp_channel(struct ibv_coll_context *context);
int ibv_destroy_coll_comp_channel(struct ibv_coll_comp_channel *channel);
struct ibv_coll_cq *ibv_create_coll_cq(struct ibv_coll_context *context, int cqe, void *cq_context,
				       struct ibv_coll_comp_channel *channel, int comp_vector);
int ibv_destroy_coll_cq(struct ibv_coll_cq *cq);
int ibv_poll_coll_cq(struct ibv_coll_cq *cq, int num_entries, struct ibv_coll_wc *wc);
int ibv_req_notify_coll_cq(struct ibv_coll_cq *cq, int solicited_only);
int ibv_get_coll_cq_event(struct ibv_coll_comp_channel *channel, struct ibv_coll_cq **cq,
			  void **cq_context);
void ibv_ack_coll_cq_events(struct ibv_coll_cq *cq, unsigned int nevents);

/* ------------------------------------------------------------------ */
/* Queue pairs                                                         */
/* ------------------------------------------------------------------ */

enum ibv_coll_qp_type {
	IBV_COLL_QPT_RC = 2,	 /* same value as IBV_QPT_RC */
	IBV_COLL_QPT_COLL = 0x20 /* a collective QP: it holds one job */
};

/* ------------------------------------------------------------------ */
/* Collective jobs                                                     */
/* ------------------------------------------------------------------ */

enum ibv_coll_topology {
	IBV_COLL_TOPO_RING = 0,	     /* reduce-scatter then allgather over the member NICs */
	IBV_COLL_TOPO_SWITCH = 1,    /* through one aggregation switch per plane */
	IBV_COLL_TOPO_HIERARCHY = 2, /* through leaf switches under a spine */
	IBV_COLL_TOPO_AUTO = 3	     /* the switch when it grants the job, else the ring */
};

/* One member device of a job.  Global ranks are numbered node by node in
 * member order: node i's local rank r is global rank
 * (members[0].num_ranks + ... + members[i-1].num_ranks) + r. */
struct ibv_coll_member {
	union ibv_gid gid;  /* the member's address (a GID of its device) */
	uint16_t udp_port;  /* its UDP port, host order; 0 means 4791 */
	uint16_t num_ranks; /* local ranks its QP serves, 1..64 */
	uint32_t qp_num;    /* its collective QP */
};

/* A job's aggregation switches (topologies SWITCH, HIERARCHY and AUTO).
 * Each of P planes is a tree: L leaf switches, and when L > 1 one spine
 * above them.  Block i of the job goes to plane i mod P; a node sends it to
 * its own leaf on that plane, and every member computes the same plane
 * without talking. */
struct ibv_coll_switch_addr {
	union ibv_gid gid; /* the switch's address (IPv4-mapped or IPv6) */
	uint16_t udp_port; /* host order; 0 means 4791 */
	uint16_t reserved; /* 0 */
	uint32_t qp_num;   /* verbs devices: the switch's UD QP, as ibv_coll_switchd
				 * --verbs prints it; crxe: 0 (ignored) */
};

enum ibv_coll_switch_flags {
	/* No configuration step: every data packet carries the task
	 * information and the switches build the job on first sight. */
	IBV_COLL_SWITCH_INLINE = 1 << 0,
	/* The benchmark baseline: a sender's window slides when a designated
	 * receiver (node 0) acknowledges the block, as in ordinary RDMA,
	 * instead of when the result comes back. */
	IBV_COLL_SWITCH_E2E_ACK = 1 << 1
};

struct ibv_coll_switch_attr {
	uint32_t num_planes; /* P: 1..8 */
	uint32_t num_leaves; /* L leaf switches per plane: 1 (SWITCH) or 2..64 (HIERARCHY) */
	const struct ibv_coll_switch_addr *leaves; /* P * L: plane p's leaf l at [p * L + l] */
	const struct ibv_coll_switch_addr *spines; /* P when L > 1, else NULL */
	const uint8_t *member_leaf; /* num_nodes entries when L > 1: each member's leaf */
	uint32_t window; /* data blocks a node keeps in flight; 0: what the grant allows */
	uint32_t flags;	 /* enum ibv_coll_switch_flags */
};

/* Three levels (IBV_COLL_JOB_ATTR_PODS, with a HIERARCHY or AUTO job's
 * sw): the L leaves of each plane in K pods, each pod's leaves under a
 * spine of its own, the K spines under a core.  sw->num_leaves is then
 * up to 64 per pod, sw->spines has P * K entries (plane p's spine of pod
 * k at [p * K + k]). */
struct ibv_coll_pods_attr {
	uint32_t num_pods;			  /* K: 2..64 */
	uint32_t reserved;			  /* 0 */
	const uint8_t *leaf_pod;		  /* L entries: each leaf's pod, less than K */
	const struct ibv_coll_switch_addr *cores; /* P: plane p's core */
	/* num_nodes entries: each member's leaf, for more than 256 leaves;
	 * NULL: sw->member_leaf */
	const uint16_t *member_leaf;
};

enum ibv_coll_job_attr_mask {
	IBV_COLL_JOB_ATTR_SWITCH = 1 << 0, /* sw is valid */
	IBV_COLL_JOB_ATTR_LOCAL = 1 << 1,  /* local_first and local_count are valid */
	IBV_COLL_JOB_ATTR_PODS = 1 << 2	   /* pods is valid (with IBV_COLL_JOB_ATTR_SWITCH) */
};

struct ibv_coll_job_attr {
	uint64_t comp_mask;		       /* enum ibv_coll_job_attr_mask */
	uint32_t jid;			       /* job id, equal on every member */
	uint32_t node_index;		       /* this node's index in members */
	uint32_t num_nodes;		       /* 1..65535 (max_nodes) */
	const struct ibv_coll_member *members; /* copied by the call */
	enum ibv_coll_topology topology;
	uint32_t seg_base; /* the job's Seg units: [seg_base, seg_base + seg_count) */
	uint32_t seg_count;
	uint32_t block_len;		       /* default data-block bytes; 0: the path MTU */
	uint64_t job_key;		       /* carried by every packet; others are dropped */
	uint32_t timeout_ms;		       /* a collective that makes no progress this long
				 * fails (IBV_COLL_STATUS_TIMEOUT); 0: the device default */
	uint32_t flags;			       /* 0 */
	const struct ibv_coll_switch_attr *sw; /* IBV_COLL_JOB_ATTR_SWITCH; copied by the call */
	/* IBV_COLL_JOB_ATTR_LOCAL: this QP serves only the node's local ranks
	 * [local_first, local_first + local_count); the node's other ranks come
	 * from other collective QPs of the same device, in other processes of
	 * the host (a shared device: the ibv_coll_devd daemon, section 8) or in
	 * this one.  The QP that members[node_index].qp_num names leads the
	 * node's part of the job: it alone talks to the network.  Every other
	 * QP joins it by giving the same job (jid, job_key, members) with its
	 * own local range.  The ranges must not overlap and, once all have
	 * joined, cover members[node_index].num_ranks.  A collective runs
	 * when every QP of the node has posted it (the same MID, opcode, op,
	 * type, count and root), and completes on each of them.  Without the
	 * flag a QP serves all of its node's ranks. */
	uint32_t local_first;
	uint32_t local_count;
	const struct ibv_coll_pods_attr *pods; /* IBV_COLL_JOB_ATTR_PODS; copied by the call */
};

enum ibv_coll_op {
	IBV_COLL_OP_SUM = 0,
	IBV_COLL_OP_PROD = 1,
	IBV_COLL_OP_MIN = 2,
	IBV_COLL_OP_MAX = 3,
	IBV_COLL_OP_AVG = 4,  /* sum, then divided by the number of ranks */
	IBV_COLL_OP_BAND = 5, /* bitwise ops: integer types only */
	IBV_COLL_OP_BOR = 6,
	IBV_COLL_OP_BXOR = 7,
	/* value-index pairs only (the *_INT32 pair types, and only these ops
	 * on them): the pair with the larger (smaller) value, the lower index
	 * on equal values, as MPI_MAXLOC and MPI_MINLOC.  A NaN value wins over
	 * any number (NaNs tie), -0.0 is below +0.0; the result's padding is
	 * zero.  Since 1.3. */
	IBV_COLL_OP_MAXLOC = 8,
	IBV_COLL_OP_MINLOC = 9,
	/* logical ops, integer types only: 1 or 0, from each value's truth
	 * (non-zero), as MPI_LAND, MPI_LOR, MPI_LXOR.  Since 1.3. */
	IBV_COLL_OP_LAND = 10,
	IBV_COLL_OP_LOR = 11,
	IBV_COLL_OP_LXOR = 12
};

enum ibv_coll_dtype {
	IBV_COLL_DTYPE_INT8 = 0,
	IBV_COLL_DTYPE_INT16 = 1,
	IBV_COLL_DTYPE_INT32 = 2,
	IBV_COLL_DTYPE_INT64 = 3,
	IBV_COLL_DTYPE_UINT8 = 4,
	IBV_COLL_DTYPE_UINT16 = 5,
	IBV_COLL_DTYPE_UINT32 = 6,
	IBV_COLL_DTYPE_UINT64 = 7,
	IBV_COLL_DTYPE_FLOAT16 = 8,
	IBV_COLL_DTYPE_BFLOAT16 = 9,
	IBV_COLL_DTYPE_FLOAT32 = 10,
	IBV_COLL_DTYPE_FLOAT64 = 11,
	/* value-index pairs for MAXLOC and MINLOC, each element the C struct
	 * { value; int32_t index; } with its padding (the layout of MPI's
	 * MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_2INT and
	 * MPI_SHORT_INT on LP64).  Since 1.3. */
	IBV_COLL_DTYPE_FLOAT32_INT32 = 12, /* 8 bytes */
	IBV_COLL_DTYPE_FLOAT64_INT32 = 13, /* 16 bytes, 4 of them padding */
	IBV_COLL_DTYPE_INT64_INT32 = 14,   /* 16 bytes, 4 of them padding */
	IBV_COLL_DTYPE_INT32_INT32 = 15,   /* 8 bytes */
	IBV_COLL_DTYPE_INT16_INT32 = 16	   /* 8 bytes, 2 of padding after the value */
};

/* Set in ibv_coll_caps.comp_mask by the library: which of the fields
 * added since the first layout it filled in.  A library without them
 * leaves comp_mask and those fields 0. */
enum ibv_coll_caps_mask {
	IBV_COLL_CAPS_FLAGS = 1 << 0 /* flags is valid */
};

enum ibv_coll_caps_flags {
	/* The context reaches the host's shared device, the one NIC that
	 * the ibv_coll_devd daemon (section 8) runs for the netdev, which other
	 * processes of the host may be using too; else the NIC is this
	 * context's own. */
	IBV_COLL_CAPS_SHARED_DEVICE = 1 << 0
};

/* What a device's collective engine can do (as SHARP's caps query). */
struct ibv_coll_caps {
	uint64_t comp_mask;	/* enum ibv_coll_caps_mask, set by the library */
	uint32_t opcodes;	/* bit (opcode - IBV_COLL_WR_ALLREDUCE) per supported opcode */
	uint32_t ops;		/* bit per enum ibv_coll_op */
	uint32_t dtypes;	/* bit per enum ibv_coll_dtype */
	uint32_t topologies;	/* bit per enum ibv_coll_topology */
	uint32_t max_seg_units; /* Seg units in the device */
	uint32_t seg_unit_bytes;
	uint32_t max_local_ranks;
	uint32_t max_nodes;
	uint32_t max_block_len;
	/* enum ibv_coll_caps_flags, with IBV_COLL_CAPS_FLAGS: it takes the four
	 * bytes the first layout left as padding, so the struct keeps its size
	 * and every offset, and older libraries, which zero the whole struct,
	 * leave it 0. */
	uint32_t flags;
	uint64_t max_count_bytes; /* bytes per rank of one collective */
};

int ibv_query_coll_caps(struct ibv_coll_context *context, struct ibv_coll_caps *caps);

/* Set in ibv_coll_counters.comp_mask by a caller whose struct has room
 * for the fields after seg_high_water (since 0.2), and after
 * coll_fallbacks (EXT2, since 1.1; it includes EXT's). */
enum ibv_coll_counters_mask {
	IBV_COLL_COUNTERS_EXT = 1 << 0,
	IBV_COLL_COUNTERS_EXT2 = 1 << 1,
};

/* The device's counters since the context was opened. */
struct ibv_coll_counters {
	uint64_t comp_mask;
	/* the port */
	uint64_t tx_packets, tx_bytes, rx_packets, rx_bytes;
	uint64_t rx_icrc_errors; /* dropped: bad invariant CRC */
	uint64_t rx_malformed;	 /* dropped: bad header, length or opcode */
	uint64_t rx_no_qp;	 /* dropped: no such QP */
	uint64_t rx_bad_source;	 /* dropped: not from the QP's peer */
	uint64_t rx_bad_state;	 /* dropped: the QP cannot take it now */
	uint64_t rx_duplicates;	 /* RC: repeated or stale packets */
	/* RC transport */
	uint64_t rc_retransmits, rc_timeouts;
	uint64_t rc_seq_naks_sent, rc_seq_naks_rcvd, rc_rnr_naks_sent, rc_rnr_naks_rcvd;
	/* collective engine */
	uint64_t coll_tx_data, coll_rx_data;	 /* partials sent and received */
	uint64_t coll_tx_result, coll_rx_result; /* results sent and received */
	uint64_t coll_tx_bytes, coll_rx_bytes;	 /* their payload bytes */
	uint64_t coll_retrans_data, coll_retrans_result;
	uint64_t coll_duplicates;		 /* blocks seen again, not reduced again */
	uint64_t coll_early, coll_early_dropped; /* blocks of messages not started here */
	uint64_t coll_stale;			 /* blocks of finished messages */
	uint64_t coll_bad_key, coll_bad_job, coll_bad_block, coll_bad_node, coll_malformed;
	uint64_t coll_seg_busy; /* a block's Seg unit was taken */
	uint64_t coll_aborts_sent, coll_aborts_rcvd, coll_timeouts;
	uint64_t coll_reductions; /* reduce operations on blocks */
	uint32_t seg_units, seg_in_use, seg_high_water;
	/* With IBV_COLL_COUNTERS_EXT in comp_mask: */
	uint64_t rc_tx_packets, rc_tx_bytes, rc_rx_packets, rc_rx_bytes; /* RC traffic alone */
	uint64_t rc_acks_sent;
	uint64_t coll_messages, coll_failed; /* collective WRs finished, not successfully */
	uint64_t coll_blocks;		     /* their data blocks */
	uint64_t coll_fallbacks;	     /* run round the ring: no switch served them */
	/* With IBV_COLL_COUNTERS_EXT2 in comp_mask: */
	uint64_t coll_rx_packets;	   /* collective packets handed to a collective QP */
	uint64_t coll_delivered;	   /* ... of them acted on (the rest: a drop counter) */
	uint64_t coll_host_dropped;	   /* ... of them dropped by the NIC (no QP, QP state) */
	uint64_t cc_cnp_sent, cc_cnp_rcvd; /* congestion notification packets */
	uint64_t cc_rate_cuts;		   /* congestion window cuts, any signal */
	uint64_t cc_retrans_bytes;	   /* payload bytes sent again (ring, switch path, RC) */
};

int ibv_query_coll_counters(struct ibv_coll_context *context, struct ibv_coll_counters *counters);

struct ibv_coll_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

struct ibv_coll_qp_init_attr {
	uint64_t comp_mask;
	void *qp_context;
	struct ibv_coll_cq *send_cq;
	struct ibv_coll_cq *recv_cq;
	struct ibv_coll_qp_cap cap;
	enum ibv_coll_qp_type qp_type;
	int sq_sig_all;
};

/* Where the peer is: RoCEv2 carries no LID, only an IP address and a UDP
 * port.  IPv4 addresses are given IPv4-mapped (::ffff:a.b.c.d). */
struct ibv_coll_ah_attr {
	union ibv_gid dgid;
	uint16_t udp_port;  /* peer's UDP port, host order; 0 means 4791 */
	uint8_t sgid_index; /* local address, an index of the GID table */
};

/* The bits have libibverbs' enum ibv_qp_attr_mask values. */
enum ibv_coll_qp_attr_mask {
	IBV_COLL_QP_STATE = 1 << 0,
	IBV_COLL_QP_CUR_STATE = 1 << 1,
	IBV_COLL_QP_ACCESS_FLAGS = 1 << 3,
	IBV_COLL_QP_PKEY_INDEX = 1 << 4,
	IBV_COLL_QP_PORT = 1 << 5,
	IBV_COLL_QP_AV = 1 << 7,
	IBV_COLL_QP_PATH_MTU = 1 << 8,
	IBV_COLL_QP_TIMEOUT = 1 << 9,
	IBV_COLL_QP_RETRY_CNT = 1 << 10,
	IBV_COLL_QP_RNR_RETRY = 1 << 11,
	IBV_COLL_QP_RQ_PSN = 1 << 12,
	IBV_COLL_QP_MAX_QP_RD_ATOMIC = 1 << 13,
	IBV_COLL_QP_MIN_RNR_TIMER = 1 << 15,
	IBV_COLL_QP_SQ_PSN = 1 << 16,
	IBV_COLL_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	IBV_COLL_QP_DEST_QPN = 1 << 20,
	IBV_COLL_QP_JOB = 1 << 28 /* collective QPs: the job (INIT -> RTR) */
};

struct ibv_coll_qp_attr {
	enum ibv_qp_state qp_state;
	enum ibv_qp_state cur_qp_state;
	enum ibv_mtu path_mtu;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct ibv_coll_qp_cap cap;
	struct ibv_coll_ah_attr ah_attr;
	uint16_t pkey_index;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer; /* IBTA encoding: 0 = 655.36 ms, 1 = 0.01 ms ... */
	uint8_t port_num;
	uint8_t timeout;		     /* 4.096 us * 2^timeout; 0 = the device default */
	uint8_t retry_cnt;		     /* 0..7 */
	uint8_t rnr_retry;		     /* 0..6, 7 = retry forever */
	const struct ibv_coll_job_attr *job; /* IBV_COLL_QP_JOB */
};

struct ibv_coll_qp {
	struct ibv_coll_context *context;
	void *qp_context;
	struct ibv_coll_pd *pd;
	struct ibv_coll_cq *send_cq;
	struct ibv_coll_cq *recv_cq;
	uint32_t handle;
	uint32_t qp_num;
	enum ibv_qp_state state;
	enum ibv_coll_qp_type qp_type;
};

struct ibv_coll_qp *ibv_create_coll_qp(struct ibv_coll_pd *pd,
				       struct ibv_coll_qp_init_attr *qp_init_attr);
int ibv_destroy_coll_qp(struct ibv_coll_qp *qp);
int ibv_modify_coll_qp(struct ibv_coll_qp *qp, struct ibv_coll_qp_attr *attr, int attr_mask);
int ibv_query_coll_qp(struct ibv_coll_qp *qp, struct ibv_coll_qp_attr *attr, int attr_mask,
		      struct ibv_coll_qp_init_attr *init_attr);

/* ------------------------------------------------------------------ */
/* Work requests                                                       */
/* ------------------------------------------------------------------ */

enum ibv_coll_wr_opcode {
	/* Ordinary RC traffic; the values are libibverbs' IBV_WR_*. */
	IBV_COLL_WR_RDMA_WRITE = 0,
	IBV_COLL_WR_RDMA_WRITE_WITH_IMM = 1,
	IBV_COLL_WR_SEND = 2,
	IBV_COLL_WR_SEND_WITH_IMM = 3,
	IBV_COLL_WR_RDMA_READ = 4,
	/* Collectives, on a collective QP.  count is per rank:
	 *   ALLREDUCE, REDUCE: each source and destination holds count elements
	 *     (REDUCE writes only the root's destination)
	 *   BCAST: the root's source, every destination: count elements
	 *   ALLGATHER: each source count, each destination count * ranks
	 *   REDUCE_SCATTER: each source count * ranks, each destination count
	 *   BARRIER: no data; QUERY: asks about wr.coll.mid */
	IBV_COLL_WR_ALLREDUCE = 0x40,
	IBV_COLL_WR_REDUCE = 0x41,
	IBV_COLL_WR_BCAST = 0x42,
	IBV_COLL_WR_ALLGATHER = 0x43,
	IBV_COLL_WR_REDUCE_SCATTER = 0x44,
	IBV_COLL_WR_BARRIER = 0x45,
	IBV_COLL_WR_QUERY = 0x46
};

enum ibv_coll_send_flags {
	IBV_COLL_SEND_FENCE = 1 << 0,
	IBV_COLL_SEND_SIGNALED = 1 << 1,
	IBV_COLL_SEND_SOLICITED = 1 << 2
};

struct ibv_coll_send_wr {
	uint64_t wr_id;
	struct ibv_coll_send_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
	enum ibv_coll_wr_opcode opcode;
	unsigned int send_flags;
	uint32_t imm_data; /* network byte order */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		/* Collective WRs: sg_list holds one source per local rank and
		 * dst_list one destination, both in rank order (num_sge each). */
		struct {
			struct ibv_sge *dst_list;
			uint64_t count;
			enum ibv_coll_op op;
			enum ibv_coll_dtype dtype;
			uint32_t root;	    /* REDUCE, BCAST: global rank */
			uint32_t mid;	    /* 0: the next message id; QUERY: the one asked about */
			uint32_t block_len; /* 0: the job's default */
		} coll;
	} wr;
};

struct ibv_coll_recv_wr {
	uint64_t wr_id;
	struct ibv_coll_recv_wr *next;
	struct ibv_sge *sg_list;
	int num_sge;
};

int ibv_post_coll_send(struct ibv_coll_qp *qp, struct ibv_coll_send_wr *wr,
		       struct ibv_coll_send_wr **bad_wr);
int ibv_post_coll_recv(struct ibv_coll_qp *qp, struct ibv_coll_recv_wr *wr,
		       struct ibv_coll_recv_wr **bad_wr);

/* ------------------------------------------------------------------ */
/* Strings and configuration                                           */
/* ------------------------------------------------------------------ */

const char *ibv_coll_wc_status_str(enum ibv_wc_status status);
const char *ibv_coll_wr_opcode_str(enum ibv_coll_wr_opcode opcode);
const char *ibv_coll_wc_opcode_str(enum ibv_coll_wc_opcode opcode);
const char *ibv_coll_status_str(enum ibv_coll_status status);

/* Print every IBV_COLL_* environment variable with its default, its value
 * in this process's environment and a line of help. */
int ibv_coll_print_config(FILE *stream);

/* The version of the library loaded at run time, "MAJOR.MINOR.PATCH".
 * <ibv_coll/version.h> has the headers' version for checks at compile
 * time.  Since IBV_COLL_1.1. */
const char *ibv_coll_version(void);

#ifdef __cplusplus
}
#endif

#endif /* IBV_COLL_IBV_COLL_H */
