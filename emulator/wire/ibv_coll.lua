-- Wireshark dissector for the collective packets of ibv_coll, and for the
-- RoCEv2 CNP, which Wireshark 4.0 shows as "Unknown (129)".
--
-- Wireshark's InfiniBand dissector decodes the BTH of every RoCEv2 packet
-- (UDP port 4791, or another port given with -d udp.port==N,infiniband)
-- but not the manufacturer-specific opcodes 0xe0-0xff our collective
-- packets use: it shows their CETH and payload as vendor bytes.  It offers
-- no dissector table for opcodes, so this is a postdissector: after it, it
-- finds each BTH whose opcode is ours and decodes what follows, as
-- ibv_coll_wire(7) documents and emulator/wire/ceth.h and
-- emulator/wire/swproto.h lay out.
--
-- Installed into Wireshark's Lua plugin folder by `cmake --install`; or
-- load it by hand:  tshark -X lua_script:ibv_coll.lua -r trace.pcap -O ibv_coll

local p = Proto("ibv_coll", "ibv_coll collective transport")

local kinds = {
	[0x81] = "CNP",
	[0xe0] = "DATA",
	[0xe1] = "RESULT",
	[0xe2] = "ACK",
	[0xe3] = "ABORT",
	[0xe4] = "CONFIG",
	[0xe5] = "CONFIG_ACK",
	[0xe6] = "RELEASE",
	[0xe7] = "STATS",
	[0xe8] = "STATS_REPLY",
	[0xe9] = "XCHG",
}
local colls = {
	[0x40] = "ALLREDUCE",
	[0x41] = "REDUCE",
	[0x42] = "BCAST",
	[0x43] = "ALLGATHER",
	[0x44] = "REDUCE_SCATTER",
	[0x45] = "BARRIER",
	[0x46] = "QUERY",
}
local ops = {
	[0] = "SUM", [1] = "PROD", [2] = "MIN", [3] = "MAX",
	[4] = "AVG", [5] = "BAND", [6] = "BOR", [7] = "BXOR",
	[8] = "MAXLOC", [9] = "MINLOC", [10] = "LAND", [11] = "LOR", [12] = "LXOR",
}
local dtypes = {
	[0] = "INT8", [1] = "INT16", [2] = "INT32", [3] = "INT64",
	[4] = "UINT8", [5] = "UINT16", [6] = "UINT32", [7] = "UINT64",
	[8] = "FLOAT16", [9] = "BFLOAT16", [10] = "FLOAT32", [11] = "FLOAT64",
	[12] = "FLOAT32_INT32", [13] = "FLOAT64_INT32", [14] = "INT64_INT32",
	[15] = "INT32_INT32", [16] = "INT16_INT32",
}
local statuses = {
	[0] = "success", [1] = "buffer error", [2] = "timeout", [3] = "remote abort",
	[4] = "denied", [5] = "local error", [6] = "flushed",
}

local F = p.fields
F.kind = ProtoField.uint8("ibv_coll.kind", "Kind", base.HEX, kinds)
F.coll = ProtoField.uint8("ibv_coll.ceth.coll", "Collective", base.HEX, colls)
F.op = ProtoField.uint8("ibv_coll.ceth.op", "Reduction op", base.DEC, ops)
F.dtype = ProtoField.uint8("ibv_coll.ceth.dtype", "Datatype", base.DEC, dtypes)
F.flags = ProtoField.uint8("ibv_coll.ceth.flags", "Flags", base.HEX)
F.f_inline = ProtoField.bool("ibv_coll.ceth.flags.inline", "Inline task", 8, nil, 0x01)
F.f_retrans = ProtoField.bool("ibv_coll.ceth.flags.retrans", "Retransmission", 8, nil, 0x02)
F.f_inplace = ProtoField.bool("ibv_coll.ceth.flags.inplace", "In place", 8, nil, 0x04)
F.f_pending = ProtoField.bool("ibv_coll.ceth.flags.pending", "Pending (CONFIG_ACK), acknowledgement (XCHG)", 8, nil, 0x08)
F.f_superseded = ProtoField.bool("ibv_coll.ceth.flags.superseded", "Superseded (ABORT)", 8, nil, 0x10)
F.f_admit = ProtoField.bool("ibv_coll.ceth.flags.admit", "Admission (tdm); round the ring: HOP; XCHG acknowledgement: own partial sent", 8, nil, 0x20)
F.f_nak = ProtoField.bool("ibv_coll.ceth.flags.nak", "NAK: partials missing (RESULT)", 8, nil, 0x40)
F.f_ask = ProtoField.bool("ibv_coll.ceth.flags.ask", "ASK: result wanted (DATA)", 8, nil, 0x80)
F.status = ProtoField.uint8("ibv_coll.ceth.status", "Status", base.DEC, statuses)
F.phase = ProtoField.uint8("ibv_coll.ceth.phase", "Phase / hop", base.DEC)
-- 0xffff: a switch
F.src_node = ProtoField.uint16("ibv_coll.ceth.src_node", "Source node", base.DEC)
F.jid = ProtoField.uint32("ibv_coll.ceth.jid", "Job (JID)", base.DEC)
F.mid = ProtoField.uint32("ibv_coll.ceth.mid", "Message (MID)", base.DEC)
F.sid = ProtoField.uint32("ibv_coll.ceth.sid", "Block (SID; XCHG: piece)", base.DEC)
F.seg = ProtoField.uint16("ibv_coll.ceth.seg", "Seg unit (ring: hop NAK number; XCHG: transmission)", base.DEC)
F.len = ProtoField.uint16("ibv_coll.ceth.len", "Payload length", base.DEC)
F.node_map = ProtoField.uint64("ibv_coll.ceth.node_map", "Node bitmap (XCHG: partial bytes; its acknowledgement: pieces here)", base.HEX)
F.rank_map = ProtoField.uint64("ibv_coll.ceth.rank_map", "Rank bitmap (ring: hop number + 1; switch RESULT/NAK: seq before + 1; XCHG: MID finished + 1)", base.HEX)
F.job_key = ProtoField.uint64("ibv_coll.ceth.job_key", "Job key", base.HEX)
F.inc = ProtoField.uint32("ibv_coll.ceth.inc", "Incarnation", base.DEC)
F.hold = ProtoField.uint32("ibv_coll.ceth.hold", "Held at endpoints (ns; XCHG acknowledgement: held back)", base.DEC)
F.queue = ProtoField.uint32("ibv_coll.ceth.queue", "Queued at endpoints (ns)", base.DEC)
F.seq = ProtoField.uint32("ibv_coll.ceth.seq", "Sequence (switch: block number; ring: hop beyond 255)", base.DEC)
F.t_node = ProtoField.uint16("ibv_coll.task.node", "Sender node", base.DEC)
F.t_nodes = ProtoField.uint16("ibv_coll.task.nodes", "Members", base.DEC)
F.t_qpn = ProtoField.uint32("ibv_coll.task.qpn", "Result QP", base.HEX)
F.t_members = ProtoField.uint64("ibv_coll.task.members", "Members (the top switch's bits)", base.HEX)
F.t_subtree = ProtoField.uint64("ibv_coll.task.subtree", "Subtree (the receiving switch's bits)", base.HEX)
F.t_seg_req = ProtoField.uint32("ibv_coll.task.seg_req", "Seg units asked", base.DEC)
F.t_up = ProtoField.uint8("ibv_coll.task.up", "Bit at the parent (leaf index)", base.DEC)
F.t_plane = ProtoField.uint8("ibv_coll.task.plane", "Plane", base.DEC)
F.t_parent_port = ProtoField.uint16("ibv_coll.task.parent_port", "Parent UDP port", base.DEC)
F.t_parent_ip = ProtoField.ipv6("ibv_coll.task.parent_ip", "Parent address")
F.a_subtree = ProtoField.uint64("ibv_coll.above.subtree", "Parent's subtree (its bits)", base.HEX)
F.a_up = ProtoField.uint8("ibv_coll.above.up", "Parent's bit at its parent (pod index)", base.DEC)
F.a_parent_port = ProtoField.uint16("ibv_coll.above.parent_port", "Parent's parent UDP port", base.DEC)
F.a_parent_ip = ProtoField.ipv6("ibv_coll.above.parent_ip", "Parent's parent address")
F.payload = ProtoField.bytes("ibv_coll.payload", "Block")
F.s_name = ProtoField.string("ibv_coll.stats.switch", "Switch name")
F.s_counter = ProtoField.string("ibv_coll.stats.counter", "Counter")
F.s_value = ProtoField.uint64("ibv_coll.stats.value", "Value", base.DEC)
F.s_pad = ProtoField.bytes("ibv_coll.stats.pad", "Room for the reply")
F.cnp_rsvd = ProtoField.bytes("ibv_coll.cnp.reserved", "CNP reserved")
F.icrc = ProtoField.uint32("ibv_coll.icrc", "ICRC", base.HEX)

local e_short = ProtoExpert.new("ibv_coll.short", "Packet shorter than its headers",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_len = ProtoExpert.new("ibv_coll.len_mismatch", "CETH length differs from the payload",
	expert.group.MALFORMED, expert.severity.WARN)
p.experts = { e_short, e_len }

local f_opcode = Field.new("infiniband.bth.opcode")
local f_udp_len = Field.new("udp.length")

local BTH, CETH, TASK, ABOVE, ICRC = 12, 64, 48, 32, 4

-- The task information (swproto.h Task).
local function add_task(tree, tvb, off)
	local t = tree:add(p, tvb(off, TASK), "Task information")
	t:add(F.t_node, tvb(off, 2))
	t:add(F.t_nodes, tvb(off + 2, 2))
	t:add(F.t_qpn, tvb(off + 4, 4))
	t:add(F.t_members, tvb(off + 8, 8))
	t:add(F.t_subtree, tvb(off + 16, 8))
	t:add(F.t_seg_req, tvb(off + 24, 4))
	t:add(F.t_up, tvb(off + 28, 1))
	t:add(F.t_plane, tvb(off + 29, 1))
	t:add(F.t_parent_port, tvb(off + 30, 2))
	t:add(F.t_parent_ip, tvb(off + 32, 16))
end

-- A three-level job's CONFIG: the Above record after the task (swproto.h).
local function add_above(tree, tvb, off)
	local t = tree:add(p, tvb(off, ABOVE), "Above (the parent as its parent's child)")
	t:add(F.a_subtree, tvb(off, 8))
	t:add(F.a_up, tvb(off + 8, 1))
	t:add(F.a_parent_port, tvb(off + 10, 2))
	t:add(F.a_parent_ip, tvb(off + 12, 16))
end

-- STATS_REPLY: the switch's name, then name/value records.
local function add_stats_reply(tree, tvb, off, len)
	if len < 32 then
		return
	end
	tree:add(F.s_name, tvb(off, 32), tvb(off, 32):stringz())
	local r = off + 32
	while r + 32 <= off + len do
		local name = tvb(r, 24):stringz()
		local item = tree:add(p, tvb(r, 32), name .. " = " .. tvb(r + 24, 8):uint64():tonumber())
		item:add(F.s_counter, tvb(r, 24), name)
		item:add(F.s_value, tvb(r + 24, 8))
		r = r + 32
	end
end

-- One collective packet whose BTH starts at bth and whose RoCE packet
-- (BTH to ICRC) is roce bytes long.
local function dissect_one(tvb, pinfo, root, bth, roce, kind)
	local name = kinds[kind] or string.format("unused 0x%02x", kind)
	local tree = root:add(p, tvb(bth, roce), "ibv_coll " .. name)
	tree:add(F.kind, tvb(bth, 1))
	if kind == 0x81 then
		if roce >= BTH + 16 + ICRC then
			tree:add(F.cnp_rsvd, tvb(bth + BTH, 16))
			tree:add(F.icrc, tvb(bth + roce - ICRC, 4))
		else
			tree:add_proto_expert_info(e_short)
		end
		pinfo.cols.info:append(" CNP")
		return
	end
	if roce < BTH + CETH + ICRC then
		tree:add_proto_expert_info(e_short)
		return
	end
	local c = bth + BTH
	local ceth = tree:add(p, tvb(c, CETH), "Collective extended transport header (CETH)")
	ceth:add(F.coll, tvb(c, 1))
	ceth:add(F.op, tvb(c + 1, 1))
	ceth:add(F.dtype, tvb(c + 2, 1))
	local fl = ceth:add(F.flags, tvb(c + 3, 1))
	fl:add(F.f_inline, tvb(c + 3, 1))
	fl:add(F.f_retrans, tvb(c + 3, 1))
	fl:add(F.f_inplace, tvb(c + 3, 1))
	fl:add(F.f_pending, tvb(c + 3, 1))
	fl:add(F.f_superseded, tvb(c + 3, 1))
	fl:add(F.f_admit, tvb(c + 3, 1))
	fl:add(F.f_nak, tvb(c + 3, 1))
	fl:add(F.f_ask, tvb(c + 3, 1))
	ceth:add(F.status, tvb(c + 4, 1))
	ceth:add(F.phase, tvb(c + 5, 1))
	ceth:add(F.src_node, tvb(c + 6, 2))
	ceth:add(F.jid, tvb(c + 8, 4))
	ceth:add(F.mid, tvb(c + 12, 4))
	ceth:add(F.sid, tvb(c + 16, 4))
	ceth:add(F.seg, tvb(c + 20, 2))
	local len_item = ceth:add(F.len, tvb(c + 22, 2))
	ceth:add(F.node_map, tvb(c + 24, 8))
	ceth:add(F.rank_map, tvb(c + 32, 8))
	ceth:add(F.job_key, tvb(c + 40, 8))
	ceth:add(F.inc, tvb(c + 48, 4))
	ceth:add(F.seq, tvb(c + 52, 4))
	ceth:add(F.hold, tvb(c + 56, 4))
	ceth:add(F.queue, tvb(c + 60, 4))

	-- The payload, without the BTH's pad, and its length as the CETH says.
	local pad = bit.band(bit.rshift(tvb(bth + 1, 1):uint(), 4), 3)
	local off = c + CETH
	local paylen = roce - BTH - CETH - ICRC - pad
	local len = tvb(c + 22, 2):uint()
	if paylen < 0 or paylen ~= len then
		len_item:add_proto_expert_info(e_len)
	end
	if paylen > 0 then
		local flags = tvb(c + 3, 1):uint()
		if kind == 0xe4 or (kind == 0xe0 and bit.band(flags, 1) ~= 0) then
			if paylen >= TASK then
				add_task(tree, tvb, off)
				off = off + TASK
				paylen = paylen - TASK
			end
			if kind == 0xe4 and paylen == ABOVE then
				add_above(tree, tvb, off)
				off = off + ABOVE
				paylen = 0
			end
		end
		if kind == 0xe7 then
			tree:add(F.s_pad, tvb(off, paylen))
		elseif kind == 0xe8 then
			add_stats_reply(tree, tvb, off, paylen)
		elseif paylen > 0 then
			tree:add(F.payload, tvb(off, paylen))
		end
	end
	tree:add(F.icrc, tvb(bth + roce - ICRC, 4))

	local jid, mid, sid = tvb(c + 8, 4):uint(), tvb(c + 12, 4):uint(), tvb(c + 16, 4):uint()
	local src = tvb(c + 6, 2):uint()
	pinfo.cols.info:append(string.format(" %s jid %u mid %u sid %u %s", name, jid, mid, sid,
		src == 0xffff and "from switch" or ("from node " .. src)))
end

function p.dissector(tvb, pinfo, root)
	local opcodes = { f_opcode() }
	if #opcodes == 0 then
		return
	end
	local lens = { f_udp_len() }
	for _, fi in ipairs(opcodes) do
		local kind = fi.value
		if kind >= 0xe0 or kind == 0x81 then
			-- The RoCE packet is the UDP payload that holds this BTH.
			local bth = fi.offset
			local roce = nil
			for _, u in ipairs(lens) do
				if u.offset < bth then
					roce = u.value - 8
				end
			end
			if roce and bth + roce <= tvb:len() then
				pinfo.cols.protocol = "IBVC"
				dissect_one(tvb, pinfo, root, bth, roce, kind)
			end
		end
	end
end

register_postdissector(p)
