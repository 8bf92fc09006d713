-- Concurrency limit (algo/concurrency.go). State: a sorted set with one
-- member per held slot, scored by the lease's expiry (µs) and named
-- "<lease>:<expiry>:<seq>" (seq numbers a lease's slots of one expiry, so
-- members stay unique), plus META scored by the latest time seen. A slot
-- is held while its expiry is above now; takes, releases and renewals remove the
-- expired ones (a read-only peek counts above now instead). The set never
-- holds more than limit slots.
-- Params: limit, lease TTL (µs).

-- leaseSlots returns the members of lease (an id string) with expiry exp,
-- or with any expiry when exp is nil.
local function leaseSlots(key, lease, exp)
  local m
  if exp then
    local s = num(exp)
    m = rcall('ZRANGEBYSCORE', key, s, s)
  else
    m = rcall('ZRANGE', key, 0, -1)
  end
  local prefix = lease .. ':'
  local out = {}
  for i = 1, #m do
    if sub(m[i], 1, #prefix) == prefix then out[#out + 1] = m[i] end
  end
  return out
end

-- leaseEnd is when a lease taken or renewed at now expires, saturated at
-- 2^53 as algo's leaseEnd: beyond it a score would be rounded.
local function leaseEnd(p, now)
  if now >= MAXTIME + 1 - p.ttl then return MAXTIME + 1 end
  return now + p.ttl
end

-- leaseSlotsLast returns the members of lease and their latest expiry (0
-- if none), in one call rather than a ZSCORE per slot.
local function leaseSlotsLast(key, lease)
  local m = rcall('ZRANGE', key, 0, -1, 'WITHSCORES')
  local prefix = lease .. ':'
  local out, last = {}, 0
  for i = 1, #m, 2 do
    if sub(m[i], 1, #prefix) == prefix then
      out[#out + 1] = m[i]
      last = max(last, tonumber(m[i + 1]))
    end
  end
  return out, last
end

-- leaseLast returns the latest lease expiry, or nil.
local function leaseLast(st)
  local r = rcall('ZREVRANGE', st.key, 0, 1, 'WITHSCORES')
  for i = 1, #r, 2 do
    if r[i] ~= META then return tonumber(r[i + 1]) end
  end
  return nil
end

-- prune forgets the leases expired at now (or at the latest time seen, if
-- later), records that time in META and returns it: for a release or a
-- renewal, which add no slot, so that trimming first (a write Redis allows
-- on a full server, after which it lets the script write on) lets them run
-- when Redis is out of memory. A take writes first instead (see decide).
local function prune(st, now)
  if now < st.c then now = st.c else st.c = now end
  if not st.ro then
    rcall('ZREMRANGEBYSCORE', st.key, '-inf', num(now))
    zmeta(st)
  end
  return now
end

ALG[9] = {
  np = 2,
  parse = function(a, i)
    return { limit = tonumber(a[i]), ttl = tonumber(a[i + 1]) }
  end,
  load = function(key, p, ro, keep)
    return zload(key, ro, keep)
  end,
  expires = function(st, p)
    if st.gone then return 0 end
    return leaseLast(st) or 0
  end,
  fresh = zfresh,
  decide = function(st, p, now, cost, lease, commit)
    local key = st.key
    if st.other then zclaim(st) end
    if now < st.c then now = st.c else st.c = now end
    -- Count and decide before writing, so that the take's first write is
    -- a ZADD, as in the sliding log (see zwrite); leases expired at now are
    -- skipped, then trimmed.
    local n = zcount(st, now)
    local allowed, rem, retry, reset = 0, 0, 0, 0
    local exp, members
    if cost > p.limit then
      rem, retry = max(p.limit - n, 0), NEVER
    elseif n + cost <= p.limit then
      allowed, rem = 1, p.limit - n - cost
      if commit and cost > 0 then
        exp = leaseEnd(p, now)
        local seq = #leaseSlots(key, lease, exp)
        local prefix = lease .. ':' .. num(exp) .. ':'
        members = {}
        for i = 1, cost do
          members[i] = prefix .. (seq + i)
        end
      end
    else
      rem = max(p.limit - n, 0)
      -- At the latest, the oldest leases expire; a release may come sooner.
      retry = micros(max(zscoreabove(key, now, n + cost - p.limit) - now, 1))
    end
    if not st.ro then
      if members then
        zadd(key, exp, members)
      else
        -- Nothing to add: META, written again after the trim, whose range
        -- holds its score (now).
        zmeta(st)
      end
      rcall('ZREMRANGEBYSCORE', key, '-inf', num(now))
      zmeta(st)
    end
    if members then n = n + cost end
    if n > 0 then reset = micros(leaseLast(st) - now) end
    if allowed == 1 and cost > 0 and not commit then
      reset = max(reset, micros(leaseEnd(p, now) - now)) -- what take would report
    end
    return allowed, rem, retry, reset, 0, now
  end,
  refund = function(st, p, now, at, cost)
    -- Leases are given back by release.
  end,
  -- rollback takes back the cost slots that a take at `at` gave lease, the
  -- undo of a reservation in an all-or-nothing take.
  rollback = function(st, p, now, at, cost, lease)
    local m = leaseSlots(st.key, lease, leaseEnd(p, at))
    table.sort(m, function(x, y) return #x < #y or (#x == #y and x < y) end)
    local drop = {}
    for i = #m, max(1, #m - cost + 1), -1 do
      drop[#drop + 1] = m[i]
    end
    if #drop > 0 then zrem(st.key, drop) end
  end,
  release = function(st, p, now, lease)
    -- Lease 0 is take's anonymous lease: it only expires.
    if lease == '0' then return false end
    prune(st, now) -- an expired lease is no longer held
    local m = leaseSlots(st.key, lease, nil)
    if #m > 0 then zrem(st.key, m) end
    return #m > 0
  end,
  -- renew moves the slots of lease to expire at now + ttl (never earlier
  -- than they did: a shortened ttl leaves them as they are), as
  -- algo.Limit.Renew; an expired or released lease is not revived.
  renew = function(st, p, now, lease)
    if lease == '0' then return false end
    now = prune(st, now) -- an expired lease is not revived
    local m, last = leaseSlotsLast(st.key, lease)
    if #m == 0 then return false end
    local exp = max(leaseEnd(p, now), last)
    zrem(st.key, m)
    local prefix, members = lease .. ':' .. num(exp) .. ':', {}
    for i = 1, #m do
      members[i] = prefix .. i
    end
    zadd(st.key, exp, members)
    return true
  end,
  save = function(st, p, now)
    zsave(st, now, leaseLast(st) or 0)
  end,
}
