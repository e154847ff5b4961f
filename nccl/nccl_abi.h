/*
 * The part of NCCL's network-plugin ABI that libnccl-net-ibv_coll.so
 * implements, declared in our own words from NCCL's published plugin
 * interface (ext-net documentation and the net_v10/v11/v12 plugin headers
 * of NCCL 2.26 - 2.30).  NCCL's headers are not packaged by Debian, so the
 * plugin carries these declarations; the layouts must match NCCL's byte
 * for byte, which tests/nccl/test_nccl_abi.cc checks against offsets
 * computed by hand from the published layout (LP64).
 *
 * Only what the plugin touches is declared; objects NCCL passes through
 * without the plugin looking inside (the device-offload handle, the
 * profiler callback's arguments) are opaque.
 */
#ifndef IBVC_NCCL_ABI_H
#define IBVC_NCCL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every plugin call returns one of these. */
typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclTimeout = 8
} ncclResult_t;

/* Element types as NCCL numbers them (ncclChar = ncclInt8 and so on are
 * aliases NCCL defines; the plugin sees only the values). */
typedef enum {
	ncclInt8 = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclFloat32 = 7,
	ncclFloat64 = 8,
	ncclBfloat16 = 9,
	ncclFloat8e4m3 = 10,
	ncclFloat8e5m2 = 11,
	ncclNumTypes = 12
} ncclDataType_t;

/* Built-in reductions; values from ncclNumOps on are user-defined ops,
 * which no network can reduce.  NCCL's enum is int-sized. */
typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
	ncclNumOps = 5,
	ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

/* Levels and subsystems of NCCL's logger (NCCL_DEBUG, NCCL_DEBUG_SUBSYS). */
typedef enum {
	NCCL_LOG_NONE = 0,
	NCCL_LOG_VERSION = 1,
	NCCL_LOG_WARN = 2,
	NCCL_LOG_INFO = 3,
	NCCL_LOG_ABORT = 4,
	NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

enum { NCCL_INIT = 0x1, NCCL_COLL = 0x2, NCCL_P2P = 0x4, NCCL_NET = 0x10, NCCL_ENV = 0x80 };

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
				  int line, const char *fmt, ...);
/* Given to the net's init; the plugin never calls it. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *pHandle,
					       int64_t pluginId, void *extData);

/* Memory a plugin may be handed (ncclNetProperties.ptrSupport, regMr's
 * type). */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* The opaque handle listen() writes and NCCL carries to the peers. */
#define NCCL_NET_HANDLE_MAXSIZE 128
/* Requests NCCL keeps in flight per comm object, at most. */
#define NCCL_NET_MAX_REQUESTS 32

/* Who runs the network's data path: the host (ours) or device code. */
typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;

/* Device-offload handle of connect/accept: NULL from host plugins. */
typedef struct ncclNetDeviceHandle_opaque ncclNetDeviceHandle_t;

/* A virtual NIC: the physical devices it merges (4 before v12, 8 in v12). */
typedef struct {
	int ndevs;
	int devs[4];
} ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v10_t ncclNetVDeviceProps_v11_t;
typedef struct {
	int ndevs;
	int devs[8];
} ncclNetVDeviceProps_v12_t;

/* Per-communicator settings NCCL gives the net (v10: to connect; v11+:
 * to init). */
typedef struct {
	int trafficClass; /* -1: undefined */
} ncclNetCommConfig_v10_t;

/* What getProperties reports about one device.  v11 adds
 * maxMultiRequestSize, v12 a larger vProps and the rail and plane ids. */
typedef struct {
	char *name;	 /* for logs */
	char *pciPath;	 /* the device in /sys, or NULL */
	uint64_t guid;	 /* unique per NIC */
	int ptrSupport;	 /* NCCL_PTR_* */
	int regIsGlobal; /* a registration serves every comm */
	int forceFlush;	 /* iflush after every receive */
	int speed;	 /* Mb/s */
	int port;
	float latency; /* us */
	int maxComms;
	int maxRecvs; /* receives grouped in one irecv */
	ncclNetDeviceType netDeviceType;
	int netDeviceVersion;
	ncclNetVDeviceProps_v10_t vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
	char *name;	 /* for logs */
	char *pciPath;	 /* the device in /sys, or NULL */
	uint64_t guid;	 /* unique per NIC */
	int ptrSupport;	 /* NCCL_PTR_* */
	int regIsGlobal; /* a registration serves every comm */
	int forceFlush;	 /* iflush after every receive */
	int speed;	 /* Mb/s */
	int port;
	float latency; /* us */
	int maxComms;
	int maxRecvs; /* receives grouped in one irecv */
	ncclNetDeviceType netDeviceType;
	int netDeviceVersion;
	ncclNetVDeviceProps_v11_t vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
	int maxMultiRequestSize; /* requests in one multi-request */
} ncclNetProperties_v11_t;

typedef struct {
	char *name;	 /* for logs */
	char *pciPath;	 /* the device in /sys, or NULL */
	uint64_t guid;	 /* unique per NIC */
	int ptrSupport;	 /* NCCL_PTR_* */
	int regIsGlobal; /* a registration serves every comm */
	int forceFlush;	 /* iflush after every receive */
	int speed;	 /* Mb/s */
	int port;
	float latency; /* us */
	int maxComms;
	int maxRecvs; /* receives grouped in one irecv */
	ncclNetDeviceType netDeviceType;
	int netDeviceVersion;
	ncclNetVDeviceProps_v12_t vProps;
	size_t maxP2pBytes;
	size_t maxCollBytes;
	int maxMultiRequestSize;
	int16_t railId;
	int16_t planeId;
} ncclNetProperties_v12_t;

/* Hints NCCL may give a v11+ net about the traffic ahead (setNetAttr). */
typedef struct {
	int32_t maxConcurrentPeers;
	int32_t minConcurrentPeers;
	int32_t maxFlowsPerPeer;
	int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
	ncclNetCommAttr_v11_t sendCommAttr;
	ncclNetCommAttr_v11_t recvCommAttr;
	uint32_t op;
	uint32_t algo;
	uint32_t proto;
} ncclNetAttr_v11_t;

/* One piece of a scattered allgather destination or reduce-scatter source. */
typedef struct {
	void *mhandle;
	void *address;
	size_t size;
} ncclNetSGE_v10_t;

/* Point-to-point net.  v11 moves the per-communicator context into init
 * (listen and connect take it) and adds finalize and setNetAttr; v12
 * differs from v11 only in its properties. */
typedef struct {
	const char *name;
	ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle,
				void **sendComm, ncclNetDeviceHandle_t **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       ncclNetDeviceHandle_t **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v10_t *config,
			     ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
				ncclNetDeviceHandle_t **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       ncclNetDeviceHandle_t **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
	ncclResult_t (*finalize)(void *ctx);
	ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v11_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v10_t *config,
			     ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
				ncclNetDeviceHandle_t **sendDevComm);
	ncclResult_t (*accept)(void *listenComm, void **recvComm,
			       ncclNetDeviceHandle_t **recvDevComm);
	ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
				    int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *comm, void *mhandle);
	ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
			      void *phandle, void **request);
	ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
			      void **mhandles, void **phandles, void **request);
	ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
			       void **request);
	ncclResult_t (*test)(void *request, int *done, int *sizes);
	ncclResult_t (*closeSend)(void *sendComm);
	ncclResult_t (*closeRecv)(void *recvComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
	ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
	ncclResult_t (*finalize)(void *ctx);
	ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v12_t;

/* Collective net (CollNet).  v11 takes a context in init and listen and
 * adds finalize; v12 differs from v11 only in its properties. */
typedef struct {
	const char *name;
	ncclResult_t (*init)(ncclDebugLogger_t logFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
	ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
				void **collComm);
	ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
	ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
				    uint64_t offset, int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *collComm, void *mhandle);
	ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,
				   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
				   void *recvMhandle, void **request);
	ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
				   ncclNetSGE_v10_t *recvParts, size_t bytesPerRank,
				   size_t windowOffset, size_t windowBytes, void *sendMhandle,
				   void **request);
	ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v10_t *sendParts,
				       void *recvData, size_t bytesPerRank, size_t windowOffset,
				       size_t windowBytes, ncclDataType_t dataType,
				       ncclRedOp_t redOp, void *recvMhandle, void **request);
	ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
	ncclResult_t (*test)(void *request, int *done, int *size);
	ncclResult_t (*closeColl)(void *collComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclCollNet_v10_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
				void **collComm);
	ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
	ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
				    uint64_t offset, int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *collComm, void *mhandle);
	ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,
				   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
				   void *recvMhandle, void **request);
	ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
				   ncclNetSGE_v10_t *recvParts, size_t bytesPerRank,
				   size_t windowOffset, size_t windowBytes, void *sendMhandle,
				   void **request);
	ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v10_t *sendParts,
				       void *recvData, size_t bytesPerRank, size_t windowOffset,
				       size_t windowBytes, ncclDataType_t dataType,
				       ncclRedOp_t redOp, void *recvMhandle, void **request);
	ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
	ncclResult_t (*test)(void *request, int *done, int *size);
	ncclResult_t (*closeColl)(void *collComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
	ncclResult_t (*finalize)(void *ctx);
} ncclCollNet_v11_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, ncclDebugLogger_t logFunction);
	ncclResult_t (*devices)(int *ndev);
	ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t *props);
	ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
	ncclResult_t (*connect)(void *handles[], int nranks, int rank, void *listenComm,
				void **collComm);
	ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int *supported);
	ncclResult_t (*regMr)(void *collComm, void *data, size_t size, int type, void **mhandle);
	ncclResult_t (*regMrDmaBuf)(void *collComm, void *data, size_t size, int type,
				    uint64_t offset, int fd, void **mhandle);
	ncclResult_t (*deregMr)(void *collComm, void *mhandle);
	ncclResult_t (*iallreduce)(void *collComm, void *sendData, void *recvData, size_t count,
				   ncclDataType_t dataType, ncclRedOp_t redOp, void *sendMhandle,
				   void *recvMhandle, void **request);
	ncclResult_t (*iallgather)(void *collComm, void *sendData, int nRecvParts,
				   ncclNetSGE_v10_t *recvParts, size_t bytesPerRank,
				   size_t windowOffset, size_t windowBytes, void *sendMhandle,
				   void **request);
	ncclResult_t (*ireducescatter)(void *collComm, int nSendParts, ncclNetSGE_v10_t *sendParts,
				       void *recvData, size_t bytesPerRank, size_t windowOffset,
				       size_t windowBytes, ncclDataType_t dataType,
				       ncclRedOp_t redOp, void *recvMhandle, void **request);
	ncclResult_t (*iflush)(void *collComm, void *data, int size, void *mhandle, void **request);
	ncclResult_t (*test)(void *request, int *done, int *size);
	ncclResult_t (*closeColl)(void *collComm);
	ncclResult_t (*closeListen)(void *listenComm);
	ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v12_t *props);
	ncclResult_t (*finalize)(void *ctx);
} ncclCollNet_v12_t;

#ifdef __cplusplus
}
#endif

#endif /* IBVC_NCCL_ABI_H */
