-- A lone take: one request on one key, of a fixed window (not a calendar
-- one), a token bucket, GCRA or a shaper, the call a serial caller makes.
-- takes.lua's steps for one key, with nothing else: no loop, no table
-- but the reply, arguments in the order they are used. Redis runs a
-- script's whole body on every call, so what is not here costs nothing.
--
-- KEYS[1]: the key. ARGV: cost; the time (µs; '' for the server's TIME);
-- the TTL floor (ms) for an explicit time (see WithTestClock); the limit,
-- packed ('<Bdddddd', see loneSpec): its kind, then limit, period (µs) for
-- a fixed window, or rate, period (µs), capacity, delay, initial level
-- (-1: full), retain (µs) for a bucket. One struct.unpack costs the server
-- less than seven arguments and their tonumber()s.
--
-- The reply: the time used, then the decision as main.lua writes one:
-- allowed (0/1), remaining, retry-after (µs, -1 for never), reset-after
-- (µs), delay (µs). The differential test
-- holds it to algo like the rest.

local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber
local rcall, rpcall, spack, sunpack = redis.call, redis.pcall, struct.pack, struct.unpack
local MAXTIME, FIXED, SHAPER = 9007199254740991, 1, 6

--#include idiv.lua

local key, cost, t, minTTL = KEYS[1], tonumber(ARGV[1]), ARGV[2], 0
if t == '' then
  local tm = redis.call('TIME')
  t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  t, minTTL = min(max(tonumber(t), 0), MAXTIME), tonumber(ARGV[3])
end
local kind, p1, p2, p3, p4, p5, p6 = struct.unpack('<Bdddddd', ARGV[4])

--#include flat.lua
return { t, allowed, rem, retry, reset, delay }
