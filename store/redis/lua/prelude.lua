-- Floodgate's algorithms for Redis. The Go package store/redis concatenates
-- prelude.lua, the algorithm files and main.lua (in that order) into one
-- script, loads it once and calls it by EVALSHA.
--
-- Every number here is a Lua number (an IEEE double). The algo package keeps
-- its integers below 2^53, where doubles are exact, and the helpers below
-- make division and modulo exact too, so these functions compute the same
-- bits as the Go reference. Float formulas are written in the Go order.

local floor, ceil, fmt, tonumber = math.floor, math.ceil, string.format, tonumber

-- idiv returns floor(a / b) for integers a, b (b > 0), exact below 2^53:
-- the double quotient can round across an integer, so it is corrected.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- tdiv is Go's integer division: it truncates toward zero.
local function tdiv(a, b)
  if a >= 0 then return idiv(a, b) end
  return -idiv(-a, b)
end

-- fmod is algo's floorMod: a mod b with the sign of b.
local function fmod(a, b)
  return a - idiv(a, b) * b
end

-- cdiv is algo's ceilDiv: ceil(a / b) for a >= 0, and 0 for a <= 0.
local function cdiv(a, b)
  if a <= 0 then return 0 end
  return idiv(a + b - 1, b)
end

-- trunc is Go's int64(x) for a float x.
local function trunc(x)
  if x >= 0 then return floor(x) end
  return ceil(x)
end

-- micros clamps a duration (µs) at zero, like algo's micros.
local function micros(us)
  if us <= 0 then return 0 end
  return us
end

-- num formats a number so that tonumber gives back the same double.
local function num(x)
  return fmt('%.17g', x)
end

-- MAXTIME is algo's maxTime, 2^53-1 µs: the latest instant the algorithms
-- work with.
local MAXTIME = 9007199254740991

-- clamp is algo's clampTime: times before the epoch are the epoch, times
-- after MAXTIME are MAXTIME.
local function clamp(t)
  if t < 0 then return 0 end
  if t > MAXTIME then return MAXTIME end
  return t
end

-- NEVER is the RetryAfter of a cost that can never be admitted.
local NEVER = -1

-- getstring reads a string-valued state; a key of another type (left by a
-- limit of another algorithm) reads as fresh and is overwritten on save.
local function getstring(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then return v end
  return nil
end

-- minTTL (ms) is set by main for groups with an explicit (test) time:
-- their TTLs follow the test clock, and a floor keeps real time between
-- two steps of a test from expiring a key the test clock still holds
-- (see WithTestClock).
local minTTL = 0

-- ttlms is the TTL (ms) of a state that expires at exp (µs) > now.
local function ttlms(now, exp)
  return math.max(cdiv(exp - now, 1000), minTTL)
end

-- savestring writes a string state with a TTL that ends at exp (µs), or
-- deletes the key when the state is no different from a fresh one.
local function savestring(key, value, now, exp)
  if exp <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, value, 'PX', ttlms(now, exp))
  end
end

-- META is the member of a sorted-set state that carries the latest time the
-- state has seen (its score). Entry members start with a digit or '-', so
-- META sorts after every entry of the same score.
local META = '~'

-- zload reads a sorted-set state's META: st.c is the latest time seen (0
-- if none) and st.mscore META's score in Redis (nil if none). A key of
-- another type reads as fresh (and is deleted unless read-only).
local function zload(key, ro)
  local st = { key = key, c = 0, ro = ro }
  local c = redis.pcall('ZSCORE', key, META)
  if type(c) == 'table' and c.err then
    if not ro then redis.call('DEL', key) end
    st.gone = true
  elseif c then
    st.c = tonumber(c)
    st.mscore = st.c
  end
  return st
end

-- zfresh makes st a fresh sorted-set state (a read-only one keeps the
-- members, which then lie outside every count).
local function zfresh(st)
  st.c, st.gone = 0, true
  if not st.ro then
    redis.call('DEL', st.key)
    st.mscore = nil
  end
end

-- zmeta records st.c in META.
local function zmeta(st)
  redis.call('ZADD', st.key, num(st.c), META)
  st.mscore, st.gone = st.c, false
end

-- zcount returns how many entries score above lo (exclusive), META
-- excluded.
local function zcount(st, lo)
  local n = redis.call('ZCOUNT', st.key, '(' .. num(lo), '+inf')
  if st.mscore and st.mscore > lo then n = n - 1 end
  return n
end

-- zsave sets the TTL of a sorted-set state to end at exp, or deletes it.
local function zsave(st, now, exp)
  if exp <= now then
    redis.call('DEL', st.key)
  else
    redis.call('PEXPIRE', st.key, ttlms(now, exp))
  end
end

-- zadd adds members (a list) with one score, in chunks that stay inside
-- Lua's stack limit for unpack.
local function zadd(key, score, members)
  local s = num(score)
  local i, n = 1, #members
  while i <= n do
    local args, j = {}, 0
    while i <= n and j < 1000 do
      args[j + 1] = s
      args[j + 2] = members[i]
      j, i = j + 2, i + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
end

-- zrem removes members (a list) in chunks.
local function zrem(key, members)
  local i, n = 1, #members
  while i <= n do
    local j = math.min(n, i + 999)
    redis.call('ZREM', key, unpack(members, i, j))
    i = j + 1
  end
end

-- zscoreabove returns the score of the k-th member (1-based) with a score
-- above lo (exclusive), or nil.
local function zscoreabove(key, lo, k)
  local r = redis.call('ZRANGEBYSCORE', key, '(' .. num(lo), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  if r[2] then return tonumber(r[2]) end
  return nil
end

-- sfresh makes st a fresh string state (fields a, b, c and the ring).
local function sfresh(st)
  st.a, st.b, st.c = 0, 0, 0
  if st.ring then
    for i in pairs(st.ring) do st.ring[i] = 0 end
  end
end

-- ALG maps an algorithm kind (algo.Kind) to its handler:
--   np                          number of params
--   parse(argv, i)              params from ARGV[i..i+np-1]
--   load(key, p, ro)            the key's state (ro: a read-only peek)
--   expires(st, p)              algo's ExpiresAt (0: no different from fresh)
--   fresh(st)                   make st fresh
--   decide(st, p, now, cost, lease, commit)
--                               algo's decide: allowed, remaining,
--                               retry-after, reset-after, delay, and the
--                               time it used (now, or the state's later
--                               time: what a refund or rollback needs)
--   refund(st, p, now, at, cost), rollback (sorted sets), release
--   save(st, p, now)            write st back with its TTL
local ALG = {}
