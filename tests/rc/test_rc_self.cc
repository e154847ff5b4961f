// RC edge cases in one process: a QP connected to itself over loopback
// (crxe), for what needs no second process.
#include "rc_endpoint.h"

#include <gtest/gtest.h>

using namespace ibvc_test;

namespace {

class RcSelf : public ::testing::Test {
protected:
	void SetUp() override
	{
		if (!test_device_is_emulated())
			GTEST_SKIP() << "needs crxe (the loopback QP)";
		ASSERT_EQ(ep_.open(RcOptions{}), 0);
		ASSERT_EQ(ep_.connect(ep_.info()), 0);
	}
	RcEndpoint ep_;
};

} // namespace

// Found by fuzz_coll_api (UBSan: null pointer passed to memcpy): the
// responder copied a zero-length READ's data from its address, which may
// be anything, NULL included.  IBTA: a zero-length READ checks no R_Key.
TEST_F(RcSelf, ZeroLengthReadOfAddressZero)
{
	ASSERT_EQ(ep_.post_send(IBV_COLL_WR_RDMA_READ, 0, 0, 0, 0, 1), 0);
	ibv_coll_wc wc{};
	ASSERT_EQ(ep_.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_coll_wc_status_str(wc.status);
	EXPECT_EQ(wc.wr_id, 1u);
	EXPECT_EQ(wc.byte_len, 0u);
	// The QP still works.
	memcpy(ep_.buf + 64, "abcd", 4);
	ASSERT_EQ(ep_.post_send(IBV_COLL_WR_RDMA_READ, 0, 4,
				reinterpret_cast<uint64_t>(ep_.buf + 64), ep_.mr->rkey, 2),
		  0);
	ASSERT_EQ(ep_.wait(&wc, 5000), 0);
	EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
	EXPECT_EQ(memcmp(ep_.buf, "abcd", 4), 0);
}
