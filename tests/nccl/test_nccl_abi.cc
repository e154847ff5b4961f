// nccl/nccl_abi.h against NCCL's published plugin layout: every offset and
// size below was computed by hand from the net_v10/v11/v12 plugin headers
// of NCCL 2.26 - 2.30 (LP64: pointers and size_t 8 bytes, int and float
// 4, enums 4), not taken from our header.  A field moved or a function
// pointer missing or added shifts what follows and fails here, before
// NCCL would call the wrong function.
#include "nccl_abi.h"

#include <gtest/gtest.h>

#include <cstddef>

namespace {

TEST(NcclAbi, ValuesNcclDefines)
{
	EXPECT_EQ(ncclInternalError, 3);
	EXPECT_EQ(ncclInvalidArgument, 4);
	EXPECT_EQ(ncclInvalidUsage, 5);
	EXPECT_EQ(ncclRemoteError, 6);
	EXPECT_EQ(ncclFloat16, 6);
	EXPECT_EQ(ncclFloat32, 7);
	EXPECT_EQ(ncclFloat64, 8);
	EXPECT_EQ(ncclBfloat16, 9);
	EXPECT_EQ(ncclFloat8e4m3, 10);
	EXPECT_EQ(ncclMax, 2);
	EXPECT_EQ(ncclMin, 3);
	EXPECT_EQ(ncclAvg, 4);
	EXPECT_EQ(sizeof(ncclRedOp_t), 4u);
	EXPECT_EQ(sizeof(ncclDataType_t), 4u);
	EXPECT_EQ(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 7);
	EXPECT_EQ(NCCL_NET_HANDLE_MAXSIZE, 128);
	EXPECT_EQ(NCCL_NET_MAX_REQUESTS, 32);
}

#define AT(T, f, off) EXPECT_EQ(offsetof(T, f), size_t(off)) << #T "." #f

TEST(NcclAbi, Properties)
{
	AT(ncclNetProperties_v10_t, name, 0);
	AT(ncclNetProperties_v10_t, pciPath, 8);
	AT(ncclNetProperties_v10_t, guid, 16);
	AT(ncclNetProperties_v10_t, ptrSupport, 24);
	AT(ncclNetProperties_v10_t, regIsGlobal, 28);
	AT(ncclNetProperties_v10_t, forceFlush, 32);
	AT(ncclNetProperties_v10_t, speed, 36);
	AT(ncclNetProperties_v10_t, port, 40);
	AT(ncclNetProperties_v10_t, latency, 44);
	AT(ncclNetProperties_v10_t, maxComms, 48);
	AT(ncclNetProperties_v10_t, maxRecvs, 52);
	AT(ncclNetProperties_v10_t, netDeviceType, 56);
	AT(ncclNetProperties_v10_t, netDeviceVersion, 60);
	AT(ncclNetProperties_v10_t, vProps, 64); // int + int[4]: 20 bytes
	AT(ncclNetProperties_v10_t, maxP2pBytes, 88);
	AT(ncclNetProperties_v10_t, maxCollBytes, 96);
	EXPECT_EQ(sizeof(ncclNetProperties_v10_t), 104u);
	AT(ncclNetProperties_v11_t, vProps, 64);
	AT(ncclNetProperties_v11_t, maxCollBytes, 96);
	AT(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
	EXPECT_EQ(sizeof(ncclNetProperties_v11_t), 112u);
	AT(ncclNetProperties_v12_t, vProps, 64); // int + int[8]: 36 bytes
	AT(ncclNetProperties_v12_t, maxP2pBytes, 104);
	AT(ncclNetProperties_v12_t, maxCollBytes, 112);
	AT(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
	AT(ncclNetProperties_v12_t, railId, 124);
	AT(ncclNetProperties_v12_t, planeId, 126);
	EXPECT_EQ(sizeof(ncclNetProperties_v12_t), 128u);
}

TEST(NcclAbi, SmallStructs)
{
	AT(ncclNetSGE_v10_t, mhandle, 0);
	AT(ncclNetSGE_v10_t, address, 8);
	AT(ncclNetSGE_v10_t, size, 16);
	EXPECT_EQ(sizeof(ncclNetSGE_v10_t), 24u);
	EXPECT_EQ(sizeof(ncclNetCommConfig_v10_t), 4u);
	AT(ncclNetAttr_v11_t, recvCommAttr, 16);
	AT(ncclNetAttr_v11_t, op, 32);
	AT(ncclNetAttr_v11_t, proto, 40);
	EXPECT_EQ(sizeof(ncclNetAttr_v11_t), 44u);
	EXPECT_EQ(sizeof(ncclNetVDeviceProps_v10_t), 20u);
	EXPECT_EQ(sizeof(ncclNetVDeviceProps_v12_t), 36u);
}

// The tables: the name, then one pointer per call in NCCL's order.
TEST(NcclAbi, CollNetTables)
{
	AT(ncclCollNet_v10_t, init, 8);
	AT(ncclCollNet_v10_t, devices, 16);
	AT(ncclCollNet_v10_t, getProperties, 24);
	AT(ncclCollNet_v10_t, listen, 32);
	AT(ncclCollNet_v10_t, connect, 40);
	AT(ncclCollNet_v10_t, reduceSupport, 48);
	AT(ncclCollNet_v10_t, regMr, 56);
	AT(ncclCollNet_v10_t, regMrDmaBuf, 64);
	AT(ncclCollNet_v10_t, deregMr, 72);
	AT(ncclCollNet_v10_t, iallreduce, 80);
	AT(ncclCollNet_v10_t, iallgather, 88);
	AT(ncclCollNet_v10_t, ireducescatter, 96);
	AT(ncclCollNet_v10_t, iflush, 104);
	AT(ncclCollNet_v10_t, test, 112);
	AT(ncclCollNet_v10_t, closeColl, 120);
	AT(ncclCollNet_v10_t, closeListen, 128);
	AT(ncclCollNet_v10_t, makeVDevice, 136);
	EXPECT_EQ(sizeof(ncclCollNet_v10_t), 144u);
	AT(ncclCollNet_v11_t, iallreduce, 80);
	AT(ncclCollNet_v11_t, makeVDevice, 136);
	AT(ncclCollNet_v11_t, finalize, 144);
	EXPECT_EQ(sizeof(ncclCollNet_v11_t), 152u);
	AT(ncclCollNet_v12_t, test, 112);
	AT(ncclCollNet_v12_t, finalize, 144);
	EXPECT_EQ(sizeof(ncclCollNet_v12_t), 152u);
}

TEST(NcclAbi, NetTables)
{
	AT(ncclNet_v10_t, init, 8);
	AT(ncclNet_v10_t, listen, 32);
	AT(ncclNet_v10_t, connect, 40);
	AT(ncclNet_v10_t, accept, 48);
	AT(ncclNet_v10_t, regMr, 56);
	AT(ncclNet_v10_t, deregMr, 72);
	AT(ncclNet_v10_t, isend, 80);
	AT(ncclNet_v10_t, irecv, 88);
	AT(ncclNet_v10_t, iflush, 96);
	AT(ncclNet_v10_t, test, 104);
	AT(ncclNet_v10_t, closeSend, 112);
	AT(ncclNet_v10_t, closeRecv, 120);
	AT(ncclNet_v10_t, closeListen, 128);
	AT(ncclNet_v10_t, getDeviceMr, 136);
	AT(ncclNet_v10_t, irecvConsumed, 144);
	AT(ncclNet_v10_t, makeVDevice, 152);
	EXPECT_EQ(sizeof(ncclNet_v10_t), 160u);
	AT(ncclNet_v11_t, isend, 80);
	AT(ncclNet_v11_t, makeVDevice, 152);
	AT(ncclNet_v11_t, finalize, 160);
	AT(ncclNet_v11_t, setNetAttr, 168);
	EXPECT_EQ(sizeof(ncclNet_v11_t), 176u);
	AT(ncclNet_v12_t, test, 104);
	AT(ncclNet_v12_t, setNetAttr, 168);
	EXPECT_EQ(sizeof(ncclNet_v12_t), 176u);
}

} // namespace
