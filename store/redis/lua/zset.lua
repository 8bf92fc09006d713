-- Helpers of the sorted-set states (sliding_log.lua, concurrency.lua),
-- included only in the scripts that hold those algorithms.

-- META is the member of a sorted-set state that carries the latest time the
-- state has seen (its score). Entry members start with a digit or '-', so
-- META sorts after every entry of the same score.
local META = '~'

-- zload reads a sorted-set state's META: st.c is the latest time seen (0
-- if none) and st.mscore META's score in Redis (nil if none). A key of
-- another type reads as fresh, and is deleted unless the call is read-only
-- or keep is set (a refund or release, which must not wipe the state of
-- another limit: it gives nothing back there).
local function zload(key, ro, keep)
  local st = { key = key, c = 0, ro = ro }
  local c = rpcall('ZSCORE', key, META)
  if type(c) == 'table' and c.err then
    if not (ro or keep) then rcall('DEL', key) end
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
    rcall('DEL', st.key)
    st.mscore = nil
  end
end

-- zmeta records st.c in META.
local function zmeta(st)
  rcall('ZADD', st.key, num(st.c), META)
  st.mscore, st.gone = st.c, false
end

-- zcount returns how many entries score above lo (exclusive), META
-- excluded.
local function zcount(st, lo)
  local n = rcall('ZCOUNT', st.key, '(' .. num(lo), '+inf')
  if st.mscore and st.mscore > lo then n = n - 1 end
  return n
end

-- zsave sets the TTL of a sorted-set state to end at exp, or deletes it.
local function zsave(st, now, exp)
  if exp <= now then
    rcall('DEL', st.key)
  else
    rcall('PEXPIRE', st.key, ttlms(now, exp))
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
    rcall('ZADD', key, unpack(args))
  end
end

-- zrem removes members (a list) in chunks.
local function zrem(key, members)
  local i, n = 1, #members
  while i <= n do
    local j = min(n, i + 999)
    rcall('ZREM', key, unpack(members, i, j))
    i = j + 1
  end
end

-- zscoreabove returns the score of the k-th member (1-based) with a score
-- above lo (exclusive), or nil.
local function zscoreabove(key, lo, k)
  local r = rcall('ZRANGEBYSCORE', key, '(' .. num(lo), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
  if r[2] then return tonumber(r[2]) end
  return nil
end

