-- Floodgate's algorithms for Redis. The Go package store/redis concatenates
-- prelude.lua, the algorithm files (each wrapped in a loader, see handler)
-- and main.lua into one
-- script, loads it once and calls it by EVALSHA.
--
-- Every number here is a Lua number (an IEEE double). The algo package keeps
-- its integers below 2^53, where doubles are exact, and the helpers below
-- make division and modulo exact too, so these functions compute the same
-- bits as the Go reference. Float formulas are written in the Go order.

-- Globals are read through locals: in Redis a global lookup goes through
-- the protected globals table, and these run many times per call.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local fmt, sub, tonumber, type = string.format, string.sub, tonumber, type
local rcall, rpcall = redis.call, redis.pcall

--#include idiv.lua

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
-- Written floor((a - 1) / b) + 1, as algo's divisor.ceil: a + b - 1 may
-- lie past 2^53 (a rate past 2^52), where a double rounds it.
local function cdiv(a, b)
  if a <= 0 then return 0 end
  return idiv(a - 1, b) + 1
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
-- The second result tells whether the key exists at all: a state that
-- saves as fresh deletes only a key that exists, since Redis checks memory
-- at a script's first write and a DEL, even of nothing, is one (on a full
-- Redis it would let the script's later writes through).
local function getstring(key)
  local v = rpcall('GET', key)
  if type(v) == 'string' then return v, true end
  return nil, v ~= false
end

-- String states are packed binary: the kind (one byte), then the fields
-- as little-endian doubles, which hold algo's integers and floats exactly
-- and cost less to read and write than text.
local spack, sunpack = struct.pack, struct.unpack

-- load3 reads a state of three fields (A, B, C) written by kind; anything
-- else reads as fresh (zeros).
local function load3(key, kind)
  local v, had = getstring(key)
  if v and #v == 25 then
    local k, a, b, c = sunpack('<Bddd', v)
    if k == kind then return { key = key, a = a, b = b, c = c, had = true } end
  end
  return { key = key, a = 0, b = 0, c = 0, had = had }
end

-- minTTL (ms) is set by main for groups with an explicit (test) time:
-- their TTLs follow the test clock, and a floor keeps real time between
-- two steps of a test from expiring a key the test clock still holds
-- (see WithTestClock).
local minTTL = 0

-- retained is algo's Limit.retained: a state full from instant full on
-- expires retain µs later (0: at once), saturated at MAXTIME.
local function retained(full, retain)
  if retain == 0 then return full end
  if full >= MAXTIME - retain then return max(full, MAXTIME) end
  return full + retain
end

-- ttlFrom (µs), set by main for a group decided at another node's time
-- (a Cluster's cross-slot reservation, see reserveCrossSlot), is this
-- server's TIME when it is earlier: PEXPIRE counts on this server's clock,
-- and a key stamped at a time ahead of it must last until this clock
-- reaches the state's expiry, or a take here alone finds it fresh early.
local ttlFrom = nil

-- ttlms is the TTL (ms) of a state that expires at exp (µs) > now.
local function ttlms(now, exp)
  if ttlFrom and ttlFrom < now then now = ttlFrom end
  return max(cdiv(exp - now, 1000), minTTL)
end

-- save3 writes a three-field state (see load3).
-- A key that does not exist is not deleted (see getstring); st.had
-- follows the key through the script.
local function save3(st, kind, now, exp)
  if exp <= now then
    if st.had ~= false then rcall('DEL', st.key) end
    st.had = false
  else
    rcall('SET', st.key, spack('<Bddd', kind, st.a, st.b, st.c), 'PX', ttlms(now, exp))
    st.had = true
  end
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
--   parse(argv, i)              params from ARGV[i..i+np-1] (main adds
--                               p.kind: families share one handler)
--   load(key, p, ro, keep)      the key's state (ro: a read-only peek; keep:
--                               a refund, release or renew, which leaves a
--                               key of another type as it is)
--   expires(st, p)              algo's ExpiresAt (0: no different from fresh)
--   fresh(st)                   make st fresh
--   decide(st, p, now, cost, lease, commit)
--                               algo's decide: allowed, remaining,
--                               retry-after, reset-after, delay, and the
--                               time it used (now, or the state's later
--                               time: what a refund or rollback needs)
--   refund(st, p, now, at, cost), rollback (sorted sets), release,
--   renew (concurrency)
--   save(st, p, now)            write st back with its TTL
-- Handlers are created on first use (see handler).
local ALG = {}

-- LOADERS maps an algorithm file to the function that defines its
-- handlers; KINDFILE maps each kind to its file.
local LOADERS = {}
local KINDFILE = {
  'fixed_window', 'sliding_log', 'sliding_window', 'bucket', 'bucket', 'bucket',
  'smooth', 'smooth', 'concurrency',
}

-- handler returns kind's handler, loading its file on first use, or nil
-- for an unknown kind.
local function handler(kind)
  local h = ALG[kind]
  if h then return h end
  local f = KINDFILE[kind]
  if f and LOADERS[f] then
    LOADERS[f]()
    LOADERS[f] = nil
  end
  return ALG[kind]
end
