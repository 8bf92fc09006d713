-- Helpers of the sorted-set states (sliding_log.lua, concurrency.lua),
-- included only in the scripts that hold those algorithms.

-- META is the member of a sorted-set state that carries the latest time the
-- state has seen (its score). Entry members start with a digit or '-', so
-- META sorts after every entry of the same score.
local META = '~'

-- zload reads a sorted-set state's META: st.c is the latest time seen (0
-- if none) and st.mscore META's score in Redis (nil if none). A key of
-- another type (left by a limit of another algorithm) reads as fresh; a
-- take deletes it before reading (see zclaim), and a read-only call, a
-- refund, release, renewal or rollback leaves it as it is (it gives
-- nothing back there, and must not wipe the state of another limit). A
-- peek then counts no entry there (st.foreign, see zcount) and so decides
-- as the take would.
local function zload(key, ro, keep)
  local st = { key = key, c = 0, ro = ro }
  local c = rpcall('ZSCORE', key, META)
  if type(c) == 'table' and c.err then
    st.gone, st.other, st.foreign = true, not (ro or keep), true
  elseif c then
    st.c = tonumber(c)
    st.mscore = st.c
  end
  return st
end

-- zfresh makes st a fresh sorted-set state. It writes nothing (see zwrite):
-- the entries left are all out of the window, or expired leases, at the
-- time the state expired by, so every count skips them and a take's trim
-- removes them after its first write; META keeps its score in Redis
-- (st.mscore) until the take writes it.
local function zfresh(st)
  st.c, st.gone = 0, true
end

-- zmeta records st.c in META.
local function zmeta(st)
  rcall('ZADD', st.key, num(st.c), META)
  st.mscore, st.gone = st.c, false
end

-- zcount returns how many entries score above lo (exclusive), META
-- excluded: none on a key of another type that a peek left alone.
local function zcount(st, lo)
  if st.foreign then return 0 end
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
-- Lua's stack limit for unpack. With st, its first ZADD also records st.c
-- in META (so a take writes its units and META in one call).
local function zadd(key, score, members, st)
  local s = num(score)
  local i, n = 1, #members
  while i <= n do
    local args, j = {}, 0
    while i <= n and j < 1000 do
      args[j + 1] = s
      args[j + 2] = members[i]
      j, i = j + 2, i + 1
    end
    if st then
      args[j + 1], args[j + 2] = num(st.c), META
      st.mscore, st.gone, st = st.c, false, nil
    end
    rcall('ZADD', key, unpack(args))
  end
end

-- zwrite is a take's first write to st's key: a ZADD of members (a list
-- scored score, or nil) and META, which Redis refuses with OOM when it is
-- full (maxmemory under noeviction) before the take has changed anything.
-- Every other write of a take comes after it: Redis checks memory only at a
-- script's first write and lets the later ones through (it never stops a
-- script half-way), and it allows a trim, DEL or ZREM on a full server
-- since they free memory, so a take that trimmed first went on to grow the
-- set past maxmemory.
local function zwrite(st, score, members)
  if members then
    zadd(st.key, score, members, st)
  else
    zmeta(st)
  end
end

-- zclaim deletes a key of another type (see zload) before a take reads
-- it, after a SET: a full server refuses SET as it refuses ZADD (see
-- zwrite), and DEL alone would let the take's later writes through.
local function zclaim(st)
  rcall('SET', st.key, '')
  rcall('DEL', st.key)
  st.other, st.foreign = nil, nil
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

