// The device's memory table: key life cycle, protection domain, access
// rights and bounds, and SGE walks across entries.
#include "nic/mr_table.h"
#include "nic/queue.h"
#include "nic/wqe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

using namespace ibv_coll::emu;

TEST(MrTable, ChecksKeyPdAccessAndBounds)
{
	MrTable t;
	uint32_t k;
	ASSERT_EQ(t.add(1, 0x1000, 0x100, kAccLocalWrite | kAccRemoteRead, &k), 0);
	EXPECT_NE(k, 0u);
	EXPECT_EQ(t.check(k, 1, 0x1000, 0x100, kAccRemoteRead), DmaErr::ok);
	EXPECT_EQ(t.check(k, 1, 0x10ff, 1, 0), DmaErr::ok);
	EXPECT_EQ(t.check(k, 1, 0x1100, 0, 0), DmaErr::ok); // empty, at the end
	EXPECT_EQ(t.check(k, 1, 0x10ff, 2, 0), DmaErr::bounds);
	EXPECT_EQ(t.check(k, 1, 0xfff, 1, 0), DmaErr::bounds);
	EXPECT_EQ(t.check(k, 1, 0x1000, UINT64_MAX, 0), DmaErr::bounds);
	EXPECT_EQ(t.check(k, 2, 0x1000, 1, 0), DmaErr::bad_pd);
	EXPECT_EQ(t.check(k, 1, 0x1000, 1, kAccRemoteWrite), DmaErr::bad_access);
	EXPECT_EQ(t.check(k ^ 1, 1, 0x1000, 1, 0), DmaErr::bad_key);
	EXPECT_EQ(t.check(0, 1, 0x1000, 1, 0), DmaErr::bad_key);
	EXPECT_EQ(t.check(0xffffff00, 1, 0x1000, 1, 0), DmaErr::bad_key);
}

TEST(MrTable, StaleKeyMissesAfterReuse)
{
	MrTable t;
	uint32_t k1, k2;
	ASSERT_EQ(t.add(1, 0x1000, 0x100, 0, &k1), 0);
	ASSERT_EQ(t.remove(k1), 0);
	EXPECT_EQ(t.remove(k1), EINVAL);
	ASSERT_EQ(t.add(1, 0x1000, 0x100, 0, &k2), 0);
	EXPECT_NE(k1, k2) << "a reused slot must change its key";
	EXPECT_EQ(t.check(k1, 1, 0x1000, 1, 0), DmaErr::bad_key);
	EXPECT_EQ(t.check(k2, 1, 0x1000, 1, 0), DmaErr::ok);
	EXPECT_EQ(t.count(), 1u);
}

TEST(SgeCursor, GatherScatterAcrossEntries)
{
	std::vector<uint8_t> a(10), b(0), c(7), flat(17), back(17);
	std::iota(flat.begin(), flat.end(), 1);
	Sge s[3] = {{reinterpret_cast<uint64_t>(a.data()), 10, 0},
		    {reinterpret_cast<uint64_t>(b.data()), 0, 0},
		    {reinterpret_cast<uint64_t>(c.data()), 7, 0}};
	SgeCursor w{s, 3};
	w.seek(0);
	w.scatter(flat.data(), 4);
	w.scatter(flat.data() + 4, 13);
	EXPECT_EQ(a[9], 10);
	EXPECT_EQ(c[0], 11);
	EXPECT_EQ(c[6], 17);
	SgeCursor r{s, 3};
	r.seek(9);
	r.gather(back.data(), 8);
	EXPECT_EQ(back[0], 10);
	EXPECT_EQ(back[1], 11);
	EXPECT_EQ(back[7], 17);
}

TEST(Queue, RingIndicesAndSizes)
{
	Queue q(5, 100);
	EXPECT_EQ(q.slots(), 8u);
	EXPECT_EQ(q.stride(), 128u);
	EXPECT_EQ(q.free_slots(), 8u);
	for (uint32_t i = 0; i < 8; i++)
		memset(q.slot(i), int(i), q.stride());
	q.publish(8);
	EXPECT_EQ(q.free_slots(), 0u);
	EXPECT_EQ(q.prod(), 8u);
	EXPECT_EQ(q.slot(9), q.slot(1));
	q.consume(3);
	EXPECT_EQ(q.free_slots(), 3u);
	EXPECT_EQ(sizeof(SendWqe), 32u);
	EXPECT_EQ(sizeof(RecvWqe), 16u);
	EXPECT_EQ(sizeof(Cqe), 64u);
	EXPECT_EQ(send_wqe_stride(4), 32u + 64u);
}
