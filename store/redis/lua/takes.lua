-- A flat script for the most common call: a batch made only of single-key
-- takes of fixed windows (not calendar ones), token buckets, GCRA and
-- shapers. It takes the ARGV and KEYS of main.lua and answers as main.lua
-- does, but defines nothing per call (Redis runs a script's whole body on
-- every call, and the prelude's and handlers' functions cost more than a
-- decision): the steps of fixed_window.lua's and bucket.lua's load,
-- expires, decide and save for one key, in local variables. The
-- differential test holds it to algo like the rest.

local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber
local rcall, rpcall, spack, sunpack = redis.call, redis.pcall, struct.pack, struct.unpack
local MAXTIME, FIXED, SHAPER = 9007199254740991, 1, 6

--#include idiv.lua

local testTTL = tonumber(ARGV[2]) or 0
-- The limits in one flat list: kind, then limit, period, calendar (0) for
-- a fixed window, or rate, period, capacity, delay, initial level, retain
-- for a bucket; at[i] is where limit i starts.
local specs, at, ai = {}, {}, 4
for i = 1, tonumber(ARGV[3]) do
  at[i] = #specs + 1
  local n = 7
  if tonumber(ARGV[ai]) == FIXED then n = 4 end
  for _ = 1, n do
    specs[#specs + 1] = tonumber(ARGV[ai])
    ai = ai + 1
  end
end

local out, o, servertime = {}, 0, nil
for g = 1, tonumber(ARGV[1]) do
  -- The group: 't', its time, 1, the limit's index, cost, lease, at.
  local t, minTTL = ARGV[ai + 1], 0
  if t == '' then
    if not servertime then
      local tm = rcall('TIME')
      servertime = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    end
    t = servertime
  else
    t, minTTL = min(max(tonumber(t), 0), MAXTIME), testTTL
  end
  local j, cost, key = at[tonumber(ARGV[ai + 3])], tonumber(ARGV[ai + 4]), KEYS[g]
  ai = ai + 7
  local kind = specs[j]

  local p1, p2, p3, p4, p5, p6 = specs[j + 1], specs[j + 2], specs[j + 3], specs[j + 4], specs[j + 5], specs[j + 6]
  --#include flat.lua
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
    allowed, t, allowed, rem, retry, reset, delay
  o = o + 7
end
return out
